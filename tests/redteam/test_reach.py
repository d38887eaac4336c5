"""Routes 1, 3 and 9 tried directly in the real sandboxes: what an agent or a training run can
reach of the project, the hidden grader, other runs and the records, and what it can change."""

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.sandbox.box import KERNELS_DIR

from .conftest import agent_sandbox, needs_bwrap, run_py, training_sandbox

SECRETS = PROJECT_ROOT / "grader_hidden" / "optimizer" / "secrets.yaml"

HUNT = r"""
import importlib.util, os, sys
targets = {targets!r}
for p in targets:
    try:
        open(p, 'rb').read(1); print('READ', p)
    except OSError as e:
        print('NOREAD', p, type(e).__name__)
print('IMPORT_AI4AI', importlib.util.find_spec('ai4ai') is not None)
print('IMPORT_HIDDEN', importlib.util.find_spec('ai4ai_hidden') is not None)
hits = []
for root, dirs, files in os.walk('/', topdown=True):
    dirs[:] = [d for d in dirs if not (root == '/' and d in ('proc', 'sys', 'dev'))]
    for n in dirs + files:
        if n in ('grader_hidden', 'secrets.yaml', 'anchors.yaml', 'repos_frozen', 'results.sqlite',
                 'val.u8', 'result.json', 'trajectory.jsonl') or 'ai4ai_hidden' in n:
            hits.append(os.path.join(root, n))
print('WALK_HITS', sorted(hits))
print('IFACES', sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))
print('CAPS', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')])
# by path component, not substring: /x/ai4ai-venv is not under /x/ai4ai
def _in(p, d):
    return os.path.isabs(p) and os.path.commonpath([os.path.normpath(p), d]) == d
print('ENV_PROJECT', [k for k, v in os.environ.items() if any(_in(p, {root!r}) for p in v.split(os.pathsep))])
print('ROOT_SEES', sorted(os.listdir({root!r})) if os.path.isdir({root!r}) else None)
try:
    open(os.path.join({venv!r}, 'planted'), 'w'); print('VENV_WRITE ok')
except OSError as e:
    print('VENV_WRITE', type(e).__name__)
"""

# A virtual environment inside the checkout (`python -m venv .venv`) is bound read-only at a neutral
# path (sandbox.VENV_INSIDE), so that the interpreter runs and the checkout's own path never appears.
VENV = Path(sys.prefix).resolve()
VENV_INSIDE = VENV.is_relative_to(PROJECT_ROOT.resolve()) and VENV != PROJECT_ROOT.resolve()


def _hunt(tmp_path, targets=None):
    from ai4ai.sandbox.box import VENV_INSIDE as moved

    return HUNT.format(
        targets=targets or _targets(tmp_path),
        root=str(PROJECT_ROOT.resolve()),
        venv=moved if VENV_INSIDE else "/nonexistent-venv",
    )


def _targets(tmp_path):
    other_run = tmp_path / "other_run"
    other_run.mkdir(exist_ok=True)
    (other_run / "result.json").write_text("{}")
    return [
        str(SECRETS),
        str(PROJECT_ROOT / "grader_hidden"),
        str(PROJECT_ROOT / "README.md"),
        str(PROJECT_ROOT / "ai4ai" / "grading" / "evaluation.py"),
        str(PROJECT_ROOT / "repos_frozen" / "optimizer" / "data" / "val.u8"),
        str(other_run / "result.json"),
        str(tmp_path / "pristine" / "model.py"),
        "../grader_hidden/optimizer/secrets.yaml",
        "/proc/1/root/" + str(SECRETS),
    ]


@needs_bwrap
def test_agent_hunting_the_grader_finds_nothing(tmp_path):
    """Route 1 (agent): grader_hidden/, the project root, the harness's pristine copy and another run's
    folder, by path, by `import ai4ai`, by walking `/`; and the network interfaces.
    Gains nothing: every read fails, ai4ai and the hidden grader are not importable, the walk finds
    none of the hidden or record files, only `lo` exists, and the environment names no project path."""
    sb, ws = agent_sandbox(tmp_path)
    out, log = run_py(sb, tmp_path, _hunt(tmp_path), "/workspace")
    assert out.returncode == 0, log
    assert not [ln for ln in log.splitlines() if ln.startswith("READ")], log
    assert log.count("NOREAD") == len(_targets(tmp_path))
    assert "IMPORT_AI4AI False" in log and "IMPORT_HIDDEN False" in log
    assert "WALK_HITS []" in log, log
    assert "IFACES ['lo']" in log
    assert "ENV_PROJECT []" in log, log
    # nothing of the project is visible at its path, a venv inside it included (bound elsewhere, not writable)
    assert "ROOT_SEES None" in log, log
    assert "VENV_WRITE ok" not in log, log


@needs_bwrap
def test_training_run_reaches_no_hidden_data_and_no_validation(tmp_path, task):
    """Route 3 (reads): the grader's training run looking for the validation split, the selection and
    test data, the hidden seeds, the hidden data source and the grader's sources.
    Gains nothing: the validation file is absent from its repo copy and every hidden path is unreadable."""
    sb, repo, _ = training_sandbox(tmp_path, task)
    targets = _targets(tmp_path) + [
        "/repo/data/val.u8",
        str(PROJECT_ROOT / "grader_hidden" / "common" / "hmm.py"),
        str(PROJECT_ROOT / "grader_hidden" / "optimizer" / "grader.py"),
    ]
    out, log = run_py(sb, tmp_path, _hunt(tmp_path, targets), "/repo")
    assert out.returncode == 0, log
    assert not [ln for ln in log.splitlines() if ln.startswith("READ")], log
    assert "IMPORT_AI4AI False" in log and "WALK_HITS []" in log and "IFACES ['lo']" in log
    assert not (repo / "data" / "val.u8").exists()


WRITES = r"""
import os, subprocess
for p in {targets!r}:
    try:
        with open(p, 'a') as f:
            f.write('PLANTED = 1\n')
        print('WROTE', p)
    except OSError as e:
        print('DENIED', p, type(e).__name__)
for m in {remounts!r}:
    r = subprocess.run(['mount', '-o', 'remount,rw,bind', m], capture_output=True)
    print('REMOUNT', m, 'ok' if r.returncode == 0 else 'refused')
    try:
        open(os.path.join(m, 'planted_after_remount.py'), 'w').write('x')
        print('WROTE', m)
    except OSError as e:
        print('DENIED', m, type(e).__name__)
"""


def _site_dir():
    from pathlib import Path

    import torch

    return str(Path(torch.__file__).parent.parent)


@needs_bwrap
def test_training_writes_only_its_output_folder(tmp_path, task):
    """Route 3 (writes): training writing into its repo copy, the kernels package, the interpreter's
    site-packages, /usr, the project and the outputs' caches and locks; and remounting a read-only
    bind read-write (as root, bwrap would leave it the capabilities to do so).
    Gains nothing: only /out, its private home and its private /tmp take writes; every remount is refused."""
    sb, repo, seed_dir = training_sandbox(tmp_path, task)
    site = _site_dir()
    targets = [
        "/out/ok.txt",
        "/home/sandbox/ok.txt",
        "/tmp/ok.txt",
        "/repo/model.py",
        "/repo/train.py",
        "/repo/sitecustomize.py",
        "/repo/__pycache__/model.cpython-311.pyc",
        "/opt/ai4ai/ai4ai_kernels/planted.py",
        site + "/sitecustomize.py",
        site + "/planted.pth",
        "/usr/planted.py",
        str(PROJECT_ROOT / "planted.txt"),
        str(PROJECT_ROOT / "outputs" / ".cache" / "planted"),
        str(PROJECT_ROOT / "outputs" / ".locks" / "cpu.lock"),
        str(tmp_path / "planted_in_run_dir.txt"),
    ]
    remounts = ["/repo", "/opt/ai4ai/ai4ai_kernels", site, "/usr"]
    out, log = run_py(sb, tmp_path, WRITES.format(targets=targets, remounts=remounts), "/repo")
    assert out.returncode == 0, log
    wrote = sorted(ln.split()[1] for ln in log.splitlines() if ln.startswith("WROTE"))
    assert wrote == ["/home/sandbox/ok.txt", "/out/ok.txt", "/tmp/ok.txt"], log
    assert log.count("REMOUNT") == 4 and " ok" not in log.replace("ok.txt", ""), log
    assert "PLANTED" not in (repo / "model.py").read_text()
    assert not (KERNELS_DIR / "planted.py").exists() and not (PROJECT_ROOT / "planted.txt").exists()
    assert not list(KERNELS_DIR.rglob("planted*")) and not (tmp_path / "planted_in_run_dir.txt").exists()
    assert (seed_dir / "out" / "ok.txt").exists()


@needs_bwrap
def test_agent_cannot_write_records_or_remount(tmp_path):
    """Routes 9 and 1 (agent): writing result.json, trajectory.jsonl or the results database of its run
    (by their host paths and relative to the workspace), planting into the proxy client, and remounting.
    Gains nothing: only the workspace and the agent's home take writes; the run's records are untouched."""
    sb, ws = agent_sandbox(tmp_path)
    run_dir = tmp_path
    db = run_dir / "results.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE results (score REAL)")
    (run_dir / "trajectory.jsonl").write_text("")
    targets = [
        "/workspace/ok.txt",
        "/home/agent/ok.txt",
        str(run_dir / "result.json"),
        str(run_dir / "trajectory.jsonl"),
        str(db),
        "../result.json",
        "../../trajectory.jsonl",
        "/opt/ai4ai/bin/ai4ai-proxy",
        str(PROJECT_ROOT / "outputs" / "results.sqlite"),
    ]
    out, log = run_py(sb, tmp_path, WRITES.format(targets=targets, remounts=["/opt/ai4ai/bin", "/usr"]), "/workspace")
    assert out.returncode == 0, log
    wrote = sorted(ln.split()[1] for ln in log.splitlines() if ln.startswith("WROTE"))
    # relative paths out of /workspace land in the sandbox's own root, never in the run dir
    assert set(wrote) <= {"/workspace/ok.txt", "/home/agent/ok.txt", "../result.json", "../../trajectory.jsonl"}, log
    assert "REMOUNT /usr ok" not in log and "REMOUNT /opt/ai4ai/bin ok" not in log
    assert not (run_dir / "result.json").exists() and (run_dir / "trajectory.jsonl").read_text() == ""
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM results").fetchone() == (0,)
    assert json.dumps(log)  # the log itself is plain text


@pytest.mark.gpu
@needs_bwrap
def test_gpu_training_sees_only_gpu_nodes_and_private_caches(tmp_path, task):
    """Route 3 on a GPU: the training sandbox binds the NVIDIA device nodes and nothing else of /dev, and
    the CUDA/Triton/inductor caches are private to the phase. Gains nothing: no host cache is shared, so no
    compiled kernel planted there reaches another phase."""
    from ai4ai.grading.context import RunContext
    from ai4ai.grading.training import build_training_copy
    from ai4ai.grading.training import training_sandbox as make
    from ai4ai.repo.submission import Submission

    setup = RunContext(task=task, scale="ci", device="cuda", threads=2, backend="bwrap", cap_s=60, run_dir=tmp_path)
    repo = build_training_copy(task, Submission({}, {}, "", 0, 0), tmp_path / "train_repo")
    sb = make(setup, repo, tmp_path / "seed_0", [], {})
    script = (
        "import os; print('DEV', sorted(d for d in os.listdir('/dev') if not d.startswith('nvidia'))); "
        "print('CACHES', [os.environ[k] for k in ('TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR', 'XDG_CACHE_HOME')])"
    )
    out, log = run_py(sb, tmp_path, script, "/repo")
    assert out.returncode == 0, log
    assert all(p.startswith("/home/sandbox/") for p in eval(log.split("CACHES ")[1].splitlines()[0]))
