"""Route 4 (weights in source): a model trained beforehand, carried in the patch.

Before the information budget, the trained optimizer-task model, quantized to 4 bits, fitted in a
patch under every cap: in comments, in string literals each under the literal cap, and (as much of
it as fits) in hex, decimal digits or many small numeric displays; it scored 0.49 at ci. Each probe
below builds such a patch with the loader that makes train.py start from the carried weights, and
asserts it gains nothing: the files carrying the payload are rejected with a reason naming the
kind of content, and nothing of them is applied.

The fast probes carry random bytes of the same length as the real payload (4-bit weights are close
to random bytes); the slow ones train the shipped algorithm at ci for real, carry its weights and
check first that the payload, applied without the filter, really is that trained model.
"""

import base64
import random
import subprocess
import sys
import textwrap

import pytest

from ai4ai.repo.leaks import INFO_FLOOR_BYTES, MAX_STRING_LITERAL
from ai4ai.repo.patches import apply_hunks, parse_patch
from ai4ai.repo.submission import MAX_PATCH_BYTES, from_patch, unified_diff

from .conftest import copy_tree, train_py_patch

N_TENSORS = 28  # parameters of the optimizer task's model at ci (sorted by name by the loader)

LOADER = '''"""Warm start: weights found beforehand, 4 bits each with one fp16 scale per tensor."""
import base64
import pathlib

import numpy as np
import torch

HERE = pathlib.Path(__file__)
{data}

def _payload() -> bytes:
    lines = HERE.read_text().splitlines()
    return {decode}


@torch.no_grad()
def load_into(model: torch.nn.Module) -> None:
    raw = np.frombuffer(_payload(), dtype=np.uint8)
    params = dict(model.named_parameters())
    names = sorted(params)
    scales = np.frombuffer(raw[:2 * len(names)].tobytes(), dtype=np.float16).astype(np.float32)
    packed = raw[2 * len(names):]
    q = np.stack([packed >> 4, packed & 15], 1).reshape(-1).astype(np.float32) - 8
    at = 0
    for name, s in zip(names, scales):
        p = params[name]
        n = min(p.numel(), len(q) - at)
        if n > 0:
            p.view(-1)[:n] = torch.from_numpy(q[at:at + n] * s)
        at += n
'''


def quantize4(state: dict) -> bytes:
    """fp16 per-tensor scales, then every weight as a signed 4-bit code (two to a byte)."""
    import numpy as np
    import torch

    names = sorted(state)
    scales = [max(float(state[n].abs().max()) / 7, 1e-8) for n in names]
    codes = torch.cat([(state[n].flatten() / s).round().clamp(-7, 7) + 8 for n, s in zip(names, scales)])
    codes = codes.to(torch.uint8).numpy()
    if len(codes) % 2:
        codes = np.append(codes, np.uint8(8))
    return np.array(scales, dtype=np.float16).tobytes() + (codes[0::2] << 4 | codes[1::2]).astype(np.uint8).tobytes()


def _comments(text: str, width: int) -> str:
    return "".join(f"# {text[i : i + width]}\n" for i in range(0, len(text), width))


def _chunks(items: list[str]) -> str:
    return "CHUNKS = (\n" + "".join(f"    {s!r},\n" for s in items) + ")\n"


WORDS = [
    a + b
    for a in ("ba", "ko", "mi", "su", "te", "ra", "lo", "fe", "di", "nu", "po", "ze", "gu", "ha", "vi", "ja")
    for b in ("n", "r", "l", "s", "t", "m", "k", "p", "d", "g", "v", "z", "x", "b", "f", "w")
]


def encode(kind: str, payload: bytes) -> tuple[str, str]:
    """(module-level data, expression giving the payload back) for one way of spelling it."""
    if kind == "base64 comments":
        return _comments(
            base64.b64encode(payload).decode(), 76
        ), 'base64.b64decode("".join(ln[2:] for ln in lines if ln.startswith("# ")))'
    if kind == "base64 literals":
        b64 = base64.b64encode(payload).decode()
        step = MAX_STRING_LITERAL - 96  # each literal under the per-literal cap
        return _chunks([b64[i : i + step] for i in range(0, len(b64), step)]), 'base64.b64decode("".join(CHUNKS))'
    if kind == "hex comments":
        return _comments(payload.hex(), 76), 'bytes.fromhex("".join(ln[2:] for ln in lines if ln.startswith("# ")))'
    if kind == "digit literals":
        size = 1_000  # bytes per chunk: 2,409 digits, under the literal cap
        parts = [payload[i : i + size] for i in range(0, len(payload), size)]
        return (
            _chunks([str(int.from_bytes(b"\1" + p, "big")) for p in parts]),
            'b"".join((n := int(c)).to_bytes((n.bit_length() + 7) // 8, "big")[1:] for c in CHUNKS)',
        )
    if kind == "numeric displays":
        size = 250  # constants per display, under the display cap
        rows = [
            f"W{i // size} = [{', '.join(str(b) for b in payload[i : i + size])}]\n"
            for i in range(0, len(payload), size)
        ]
        return "".join(rows), f"bytes(v for i in range({len(rows)}) for v in globals()[f'W{{i}}'])"
    if kind == "word comments":
        words = " ".join(WORDS[b] for b in payload)
        return (
            _comments(words, 76),
            f'bytes({WORDS!r}.index(w) for ln in lines if ln.startswith("# ") for w in ln[2:].split())',
        )
    raise ValueError(kind)


def attack_patch(task, kind: str, payload: bytes) -> str:
    """train.py loads algorithm/weights.py's payload into the model it has just built."""
    data, decode = encode(kind, payload)
    weights = LOADER.format(data=data, decode=decode)
    hook = "from algorithm.weights import load_into  # noqa: E402\nload_into(model)\n"
    return train_py_patch(task, "model = build_model", hook) + unified_diff("algorithm/weights.py", None, weights)


# How much of a 4-bit model each spelling can carry under the 100 KB patch cap (the full payload
# where it fits), and what the rejection must name besides the compressed size.
CASES = [
    ("base64 comments", None, "base64-like runs"),
    ("base64 literals", None, "string literals over"),
    ("hex comments", 45_000, "hex runs"),
    ("digit literals", 38_000, "digit runs"),
    ("numeric displays", 20_000, "numeric constants"),
    ("word comments", 12_000, "information budget"),
]


def _fits_today(patch: str) -> bool:
    return len(patch.encode()) < MAX_PATCH_BYTES


def _assert_rejected(task, pristine, patch: str, named: str):
    sub = from_patch(task, pristine, patch, scale="ci")
    assert "algorithm/weights.py" not in sub.files and "weights.py" not in sub.patch
    reason = sub.rejected["algorithm/weights.py"]
    assert named in reason and "information budget" in reason, reason
    return sub


@pytest.mark.parametrize("kind,cut,named", CASES)
def test_a_model_sized_payload_is_rejected_however_it_is_spelled(task, pristine, kind, cut, named):
    """Route 4: random bytes the size of the ci model at 4 bits (or as much as the patch cap lets
    the spelling carry), in comments, literals under the literal cap, hex, decimal digits, numeric
    displays under the display cap, or words. Each patch is under the size cap (the old filter
    accepted it); gains nothing: the payload file is rejected for its kind and its compressed size."""
    payload = random.Random(0).randbytes(2 * N_TENSORS + task.scale("ci").n_params // 2)[:cut]
    patch = attack_patch(task, kind, payload)
    assert _fits_today(patch), len(patch)
    _assert_rejected(task, pristine, patch, named)


@pytest.mark.parametrize(
    "kind,size,named",
    [
        ("base64 comments", 3_000, "base64-like runs"),
        ("hex comments", 2_000, "hex runs"),
        ("digit literals", 1_500, "digit runs"),
        ("numeric displays", 1_000, "numeric constants"),
    ],
)
def test_a_payload_under_the_compressed_budget_is_still_rejected_for_its_kind(task, pristine, kind, size, named):
    """Route 4, small: a few KB (a layer's worth at 4 bits) that compress under the information
    budget, spelled as base64, hex, digits or numeric constants. Gains nothing: the kind's own
    allowance rejects the file, naming the kind and the line it starts at."""
    payload = random.Random(1).randbytes(size)
    patch = attack_patch(task, kind, payload)
    sub = from_patch(task, pristine, patch, scale="ci")
    reason = sub.rejected["algorithm/weights.py"]
    assert named in reason and "from line" in reason and "information budget" not in reason, reason
    assert "algorithm/weights.py" not in sub.files


def test_spreading_a_payload_over_files_gains_nothing(task, pristine):
    """Route 4: the same model-sized base64 payload cut into 40 files of the editable folder, each
    small. Gains nothing: allowances and the compressed size are summed over the whole patch, and
    every file that carries a share is rejected."""
    b64 = base64.b64encode(random.Random(2).randbytes(40_000)).decode()
    n = 40
    step = -(-len(b64) // n)
    patch = "".join(
        unified_diff(f"algorithm/part{i:02d}.py", None, _comments(b64[i * step : (i + 1) * step], 76)) for i in range(n)
    )
    sub = from_patch(task, pristine, patch, scale="ci")
    assert sub.files == {} and len(sub.rejected) == n
    assert all("base64-like runs" in r and "information budget" in r for r in sub.rejected.values())


def test_code_copied_from_the_repo_costs_little(task, pristine):
    """The budget measures what is new: a patch that adds a module copying the repo's own train.py,
    model.py and data.py (about 6 KB of text) and edits them slightly is accepted, because the pristine
    sources are the compressor's dictionary."""
    copied = "".join((task.repo / f).read_text() for f in ("train.py", "model.py", "data.py"))
    new = copied.replace("BATCH_SIZE = 32", "BATCH_SIZE = 16")
    assert len(new.encode()) > INFO_FLOOR_BYTES * 0.7
    sub = from_patch(task, pristine, unified_diff("algorithm/copied.py", None, new), scale="ci")
    assert not sub.rejected and "algorithm/copied.py" in sub.files


# --------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The shipped algorithm trained at ci (seed 0), from a copy of the repo: its last checkpoint."""
    from safetensors.torch import load_file

    from ai4ai.core.task import load_task

    task = load_task("optimizer")
    tmp = tmp_path_factory.mktemp("trained")
    repo = copy_tree(task.repo, tmp / "repo")
    out = tmp / "out"
    r = subprocess.run(
        [
            sys.executable,
            "train.py",
            "--out",
            str(out),
            "--seed",
            "0",
            "--scale",
            "ci",
            "--budget-s",
            "100",
            "--device",
            "cpu",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    ckpt = sorted(out.glob("ckpt_*.safetensors"))[-1]
    return ckpt, load_file(str(ckpt))


def _val_nll(repo, script_setup: str) -> float:
    code = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, ".")
        from model import build_model, next_token_nll
        from data import load_sequences
        torch.manual_seed(0)
        model = build_model("ci").eval()
        {script_setup}
        with torch.no_grad():
            print(float(next_token_nll(model, load_sequences("val")[:128]).mean()))
        """)
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return float(r.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["base64 comments", "base64 literals"])
def test_the_trained_model_carried_in_a_patch_is_rejected(tmp_path, task, pristine, trained, kind):
    """Route 4, as filed: the shipped algorithm's trained ci model at 4 bits, base64 in comments of
    algorithm/weights.py (a ~75 KB patch) or in literals each under the literal cap, loaded by train.py.
    The payload is real: applied without the filter, the carried model's validation NLL is the trained
    model's (a fresh model is ~1 nat worse). Gains nothing: the file is rejected for its base64 runs,
    long literals and compressed size."""
    ckpt, state = trained
    payload = quantize4(state)
    assert len(payload) == 2 * N_TENSORS + task.scale("ci").n_params // 2
    patch = attack_patch(task, kind, payload)
    assert _fits_today(patch), len(patch)

    repo = copy_tree(task.repo, tmp_path / "applied")
    for old, new, hunks in parse_patch(patch):  # what the old filter let through
        base = repo / new
        base.write_text(apply_hunks(base.read_text() if old else "", hunks))
    fresh = _val_nll(repo, "")
    carried = _val_nll(repo, "from algorithm.weights import load_into; load_into(model)")
    full = _val_nll(
        repo,
        f"from checkpoint import *; from safetensors.torch import load_file; "
        f"model.load_state_dict(load_file({str(ckpt)!r}), strict=False)",
    )
    assert carried < full + 0.05 and carried < fresh - 0.5, (fresh, carried, full)

    _assert_rejected(task, pristine, patch, "base64-like runs")
