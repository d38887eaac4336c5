"""Route 6 (unmetered data from the sandbox's own packages): scikit-learn ships the 8x8 digits that
diffusion_rl's budget meters (half of them are the hidden scorer's); fine-tuning on them directly
scored 0.31 with no metered sample. The training and agent sandboxes must not expose any dataset an
installed package bundles. Looked for from inside the real training sandbox."""

import json
from pathlib import Path

from ai4ai.sandbox.box import Mount
from ai4ai.sandbox.package_data import DATASETS, RUNTIME, bwrap_args, hidden_paths, python_dirs

from .conftest import agent_sandbox, needs_bwrap, run_py, training_sandbox

PROBE = r"""
import json, os, sklearn.datasets as ds
from pathlib import Path
out = {}
try:
    out["digits"] = int(ds.load_digits().data.shape[0])
except Exception as e:
    out["digits"] = type(e).__name__
folder = Path(ds.__file__).parent / "data"
out["listing"] = sorted(os.listdir(folder)) if folder.is_dir() else None
try:
    out["csv_bytes"] = len((folder / "digits.csv.gz").read_bytes())
except OSError as e:
    out["csv_bytes"] = type(e).__name__
print("PROBE " + json.dumps(out))
"""

# What training needs of the packages must still work with the data hidden.
STILL_WORKS = r"""
import numpy, safetensors, scipy.stats, sklearn, torch, transformers
from transformers import GPT2Config, GPT2LMHeadModel
m = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=8, n_embd=8, n_layer=1, n_head=2))
print("WORKS", scipy.stats.qmc.Sobol(2, seed=0).random(4).shape, sum(p.numel() for p in m.parameters()) > 0)
"""


def _probe(sb, tmp_path, script=PROBE, tag="PROBE", cwd="/repo"):
    out, log = run_py(sb, tmp_path, script, cwd, timeout=240)
    assert out.returncode == 0, log[-3000:]
    line = next(ln for ln in log.splitlines() if ln.startswith(tag + " "))
    return json.loads(line[len(tag) + 1 :]) if tag == "PROBE" else line


def _sites(rel: str) -> list[Path]:
    """Every copy of `rel` in the interpreter's folders: a venv and the interpreter it was made from
    (bound too, for the standard library) can each hold the same package."""
    found = {p for d in python_dirs() for p in (Path(d) / rel, *Path(d).glob(f"lib/python*/site-packages/{rel}"))}
    return sorted(p for p in found if p.exists())


def _site(rel: str) -> Path:
    return _sites(rel)[0]


def test_the_bundled_datasets_are_found():
    """The scan finds every bundled dataset this interpreter has, the data of the packages' own
    tests, and nothing a package reads at run time."""
    hidden = set(hidden_paths())
    for rel in DATASETS:
        assert _sites(rel) and set(_sites(rel)) <= hidden, rel
    assert _site("sklearn/datasets/data") in hidden and (_site("sklearn/datasets/data") / "digits.csv.gz").exists()
    assert _site("scipy/stats/tests") in hidden
    for rel in RUNTIME:
        for p in _sites(rel):
            assert not any(p == h or p.is_relative_to(h) for h in hidden), rel
    datasets = {p for rel in DATASETS for p in _sites(rel)}
    for h in hidden:
        assert h not in python_dirs(), h
        # a folder of code is hidden only when it is a test suite or a bundled dataset
        if h.is_dir() and any(f.suffix in (".py", ".so") for f in h.iterdir()):
            assert h.name in ("tests", "test") or h in datasets, h


def test_bwrap_args_tmpfs_folders_and_null_files():
    folder, file = _site("sklearn/datasets/data"), _site("networkx/generators/atlas.dat.gz")
    assert bwrap_args([folder, file]) == ["--tmpfs", str(folder), "--ro-bind", "/dev/null", str(file)]


def _hiding_mounts(tmp_path) -> list:
    """The same hiding as bwrap_args, spelled with the Sandbox's own mounts: an empty folder bound
    read-only over each folder (what --tmpfs gives), /dev/null over each file."""
    empty = tmp_path / "empty"
    empty.mkdir()
    return [Mount(str(p), empty if p.is_dir() else Path("/dev/null"), False) for p in hidden_paths()]


@needs_bwrap
def test_the_mounts_hide_the_data_and_training_still_runs(tmp_path):
    """Route 6 with the mounts package_data prescribes added to the real training sandbox:
    load_digits fails, the folder is empty, the file cannot be read; torch, transformers, scipy
    (Sobol reads its package data) and sklearn still import and run."""
    from ai4ai.core.task import load_task

    task = load_task("diffusion_rl")
    sb, _, _ = training_sandbox(tmp_path, task)
    sb.mounts += _hiding_mounts(tmp_path)
    seen = _probe(sb, tmp_path)
    assert seen == {"digits": "FileNotFoundError", "listing": [], "csv_bytes": "FileNotFoundError"}, seen
    assert "WORKS (4, 2) True" in _probe(sb, tmp_path, STILL_WORKS, "WORKS")


@needs_bwrap
def test_the_training_sandbox_exposes_no_package_dataset(tmp_path):
    """Route 6 as filed: from inside the grader's training sandbox for diffusion_rl, a submission
    asks scikit-learn for its digits and reads the bundled file. Gains nothing once the training
    sandbox mounts package_data.hidden_paths() (before, it read all 1,797 digits)."""
    from ai4ai.core.task import load_task

    task = load_task("diffusion_rl")
    sb, _, _ = training_sandbox(tmp_path, task)
    seen = _probe(sb, tmp_path)
    assert seen["digits"] == "FileNotFoundError" and not seen["listing"] and seen["csv_bytes"] == "FileNotFoundError", (
        seen
    )


@needs_bwrap
def test_the_agent_sandbox_exposes_no_package_dataset(tmp_path):
    """The same from the agent's sandbox (built by the function pipeline.run calls): an agent cannot
    copy the bundled digits into the workspace for its training code to read."""
    sb, _ = agent_sandbox(tmp_path)
    seen = _probe(sb, tmp_path, cwd="/workspace")
    assert seen["digits"] == "FileNotFoundError" and not seen["listing"] and seen["csv_bytes"] == "FileNotFoundError", (
        seen
    )
