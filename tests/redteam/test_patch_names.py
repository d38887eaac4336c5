"""Route 4b (weights in file names): information carried by what a patch names, not what it writes.

As filed (issue 39, part 4): 161 empty new files in agentic_rl's editable folder whose names spelled
30 KB of weights trained outside the graded run, and a train.py that decoded them, scored 0.921 at ci
with zero environment steps (shipped: 0.1). The same bytes as comments were over the information
budget 3.7 times. Measured on the code before the fix, with the probe below (162 names of 265 bytes,
a 7,500-float least-squares fit): from_workspace accepted all 162 files and train.py, with no
rejection; check_information said {} of them; the submission.patch written for the run was 0 bytes
(unified_diff wrote nothing for an empty new file), yet the grader applied the 162 files from
Submission.files, and a resume from that patch would have graded without them.

Now a patch's paths are measured like its text (leaks.measured_stream) and capped (check_names): at
most MAX_NEW_FILES new files and MAX_NAME_BYTES of paths. The reader decides each git header that can
say more than ---/+++ (renames, copies, binaries, modes, symlinks): refused with its reason.
"""

import base64
import os
import subprocess
import sys

import pytest

from ai4ai.core.task import load_task
from ai4ai.repo.leaks import (
    INFO_FLOOR_BYTES,
    MAX_NAME_BYTES,
    MAX_NEW_FILES,
    MAX_PATH_BYTES,
    compressed_size,
    measured_stream,
)
from ai4ai.repo.patches import PatchFormatError, parse_patch
from ai4ai.repo.submission import apply, from_patch, from_workspace, unified_diff
from ai4ai.repo.workspace import pristine_copy

from .conftest import copy_tree, train_py_patch

STEP = 248  # base64 characters per name: "algorithm/" + "nNNN" + 248 + ".py", a 255-byte file name at most

DECODER = """import base64 as _b64, os as _os  # noqa: E402
_names = sorted(n for n in _os.listdir("algorithm") if n.startswith("n") and n.endswith(".py"))
_raw = _b64.urlsafe_b64decode("".join(n[4:-3] for n in _names) + "==")
with torch.no_grad():
    _flat = torch.nn.utils.parameters_to_vector(model.parameters())
    _w = torch.from_numpy(np.frombuffer(_raw, dtype=np.float32).copy())[: _flat.numel()]
    _flat[: _w.numel()] = _w
    torch.nn.utils.vector_to_parameters(_flat, model.parameters())
"""


def trained_payload() -> bytes:
    """30,000 bytes of real information: a 75 x 100 least-squares fit, trained here, outside any run."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 75, generator=g)
    y = x @ torch.randn(75, 100, generator=g) + 0.1 * torch.randn(512, 100, generator=g)
    return torch.linalg.lstsq(x, y).solution.contiguous().numpy().tobytes()


def names_for(payload: bytes) -> list[str]:
    enc = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    return [f"algorithm/n{i // STEP:03d}{enc[i : i + STEP]}.py" for i in range(0, len(enc), STEP)]


@pytest.fixture(scope="module")
def rl():
    return load_task("agentic_rl")


@pytest.fixture
def rl_pristine(tmp_path, rl):
    return pristine_copy(rl, tmp_path / "pristine")


def _attack_workspace(tmp_path, task, names):
    ws = copy_tree(task.repo, tmp_path / "ws")
    for rel in names:
        (ws / rel).write_text("")
    hook = train_py_patch(task, "model = load_prepared", DECODER)
    (sub,) = parse_patch(hook)
    (ws / "train.py").write_text(sub.apply((task.repo / "train.py").read_text()))
    return ws


def test_the_payload_in_names_is_real(tmp_path, rl):
    """What the old filter let through decodes to the trained tensor, byte for byte: the names of
    the files in the applied copy are the weights."""
    payload = trained_payload()
    names = names_for(payload)
    assert len(payload) == 30_000 and len(names) == 162
    ws = _attack_workspace(tmp_path, rl, names)
    code = (
        "import base64, os, sys; n = sorted(x for x in os.listdir('algorithm') if x.startswith('n') and "
        "x.endswith('.py')); sys.stdout.write(base64.urlsafe_b64decode(''.join(x[4:-3] for x in n) + '==').hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ws, capture_output=True, text=True, timeout=60)
    assert bytes.fromhex(out.stdout) == payload


def test_weights_in_file_names_are_rejected_from_a_workspace(tmp_path, rl, rl_pristine):
    """Route 4b, as filed: 162 empty files named with 30 KB of trained weights, and the decoder in
    train.py. Before: all accepted, a 0-byte submission.patch. Gains nothing now: every named file is
    rejected for the count of new files, the length of its path and the bytes of all paths; what is
    accepted (the decoder alone) carries no weights, and the patch shows every file it applies."""
    names = names_for(trained_payload())
    ws = _attack_workspace(tmp_path, rl, names)
    sub = from_workspace(rl, rl_pristine, ws, scale="ci")
    assert not any(rel.startswith("algorithm/n") for rel in sub.files), sorted(sub.files)[:3]
    shown = [r for p, r in sub.rejected.items() if p.startswith("algorithm/n")]
    assert shown and all(
        f"limit {MAX_NEW_FILES}" in r and "paths take" in r and f"limit {MAX_PATH_BYTES}" in r for r in shown
    ), shown[0]
    assert "information budget" in shown[0]
    assert set(sub.files) <= {"train.py"}
    again = from_patch(rl, rl_pristine, sub.patch, scale="ci")
    assert again.files == sub.files  # submission.patch holds every file the grader applies


def test_weights_in_file_names_are_rejected_from_a_patch(rl, rl_pristine):
    """The same as a patch file (empty new files now have their --- and +++ lines)."""
    names = names_for(trained_payload())
    patch = train_py_patch(rl, "model = load_prepared", DECODER) + "".join(unified_diff(rel, None, "") for rel in names)
    assert patch.count("+++ b/algorithm/n") == len(names)
    sub = from_patch(rl, rl_pristine, patch, scale="ci")
    assert set(sub.files) <= {"train.py"} and all(sub.rejected.get(rel) for rel in names[:99])


@pytest.mark.parametrize("per_file", [MAX_NEW_FILES, 4])
def test_names_under_the_caps_still_count_against_the_budget(rl, rl_pristine, per_file):
    """Names that fit the caps (16 files, 1 KB of paths) carry at most ~700 bytes, and they are in the
    measured stream: the budget compresses them with the text, so names plus comments cannot carry
    more than the text alone could."""
    enc = base64.urlsafe_b64encode(os.urandom(2_000)).decode().rstrip("=")
    room = min(MAX_NAME_BYTES // per_file, MAX_PATH_BYTES) - len("algorithm/n00.py")
    names = [f"algorithm/n{i:02d}{enc[i * room : (i + 1) * room]}.py" for i in range(per_file)]
    assert all(len(n.encode()) <= MAX_PATH_BYTES for n in names)
    texts = {rel: (None, "") for rel in names}
    stream = measured_stream(texts)
    assert all(rel in stream for rel in names)
    sub = from_patch(rl, rl_pristine, "".join(unified_diff(rel, None, "") for rel in names), scale="ci")
    # accepted, but what they carry was measured: well under the floor and counted
    assert sorted(sub.files) == sorted(names), sub.rejected
    assert 0 < compressed_size(stream.encode()) < INFO_FLOOR_BYTES


def test_honest_new_modules_are_accepted_and_round_trip(optimizer_task, tmp_path):
    """An algorithm split into modules: an empty one and two others. Accepted, and the
    written patch (what a resume grades) gives back the same files, the empty one included."""
    task = optimizer_task
    pristine = pristine_copy(task, tmp_path / "pristine")
    ws = copy_tree(task.repo, tmp_path / "ws")
    (ws / "algorithm" / "hooks.py").write_text("")
    (ws / "algorithm" / "schedule.py").write_text("def lr_at(step, base):\n    return base * min(1.0, step / 100)\n")
    (ws / "algorithm" / "clip.py").write_text("MAX_NORM = 1.0\n")
    sub = from_workspace(task, pristine, ws, scale="ci")
    assert not sub.rejected and sorted(sub.files) == [
        "algorithm/clip.py",
        "algorithm/hooks.py",
        "algorithm/schedule.py",
    ]
    again = from_patch(task, pristine, sub.patch, scale="ci")
    assert again.files == sub.files and again.files["algorithm/hooks.py"] == ""
    dest = copy_tree(task.repo, tmp_path / "applied")
    apply(again, dest)
    assert (dest / "algorithm" / "hooks.py").read_text() == ""


def test_a_deletion_counts_its_name(optimizer_task, tmp_path):
    """Deleting a file is a choice the patch makes: its path is in the measured stream."""
    task = optimizer_task
    pristine = pristine_copy(task, tmp_path / "pristine")
    text = (pristine / "optim.py").read_text()
    patch = unified_diff("optim.py", text, None)
    assert patch.startswith("--- a/optim.py\n+++ /dev/null\n")
    assert "delete optim.py" in measured_stream({"optim.py": (text, None)})


GIT = "diff --git a/algorithm/x.py b/algorithm/x.py\n"
BODY = "--- /dev/null\n+++ b/algorithm/x.py\n@@ -0,0 +1 @@\n+x = 1\n"


@pytest.mark.parametrize(
    "text,named",
    [
        (GIT + "new file mode 120000\n" + BODY.replace("x = 1", "/etc/passwd"), "file mode 120000"),
        (GIT + "new file mode 100755\n" + BODY, "file mode 100755"),
        (GIT + "new file mode 160000\n" + BODY, "file mode 160000"),
        (GIT + "old mode 100644\nnew mode 100755\n", "mode change"),
        (
            "diff --git a/optim.py b/algorithm/x.py\nsimilarity index 100%\nrename from optim.py\n"
            "rename to algorithm/x.py\n",
            "rename",
        ),
        ("diff --git a/optim.py b/algorithm/x.py\ncopy from optim.py\ncopy to algorithm/x.py\n", "copy"),
        (GIT + "new file mode 100644\nindex 0000000..1234567\nGIT binary patch\nliteral 5\nabc\n", "binary"),
        ("Binary files /dev/null and b/algorithm/x.py differ\n", "binary"),
        (GIT + "new file mode 100644\nindex 0000000..e69de29\n", "without --- and +++"),
        (GIT + "index 1234567..89abcde 100755\n" + BODY, "file mode 100755"),
    ],
)
def test_what_the_reader_cannot_apply_is_refused_with_its_reason(text, named):
    """Renames, copies, binaries, symlinks, executables, submodules, mode changes, and git's form of an
    empty new file: none of them is applied as written, so none is read silently; each is refused."""
    with pytest.raises(PatchFormatError) as e:
        parse_patch(text)
    assert named in str(e.value), str(e.value)


def test_git_headers_that_say_nothing_more_are_read():
    """`diff --git`, `index` and `new file mode 100644` say nothing the --- and +++ lines do not."""
    (fp,) = parse_patch(GIT + "new file mode 100644\nindex 0000000..1234567\n" + BODY)
    assert fp.old is None and fp.new == "algorithm/x.py" and fp.apply("") == "x = 1\n"
