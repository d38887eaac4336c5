"""The GPU tiers' large training splits as Hugging Face `datasets` folders (issue: the stack research
repos use). Invariants: a split written by `write_splits` as an `ArrowSplit` is the same bytes on
every write (state.json's fingerprint is the content's, not a random one), every file of it is in
the checksums, `datasets.load_from_disk` reads back the rows written; each such repo's data.py
serves from it exactly what it serves from the raw tensor for every index the tensor accepts as a
[B] integer index, refuses every other index, and refuses a folder whose files differ in any byte,
name or number from the listing beside it. Checked with the real `datasets` and pyarrow."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core.hidden import ArrowSplit, write_splits
from ai4ai.core.task import load_task
from ai4ai.repo import preparing
from ai4ai.repo.preparing import read_sums, verify, write_sums
from tests.forkserver import fork_server

SEQ_LEN = 128
# the repos whose GPU tiers' training split is a datasets folder: (its data env, how its data.py loads a
# split by name, the shape of one row)
REPOS = {
    "optimizer": ("OPTIMIZER_DATA_DIR", "data.load_sequences({name!r})", (128,)),
    "sft": ("SFT_DATA_DIR", "data.load_sequences({name!r})", (64,)),
    "dpo": ("DPO_DATA_DIR", "data.load_rows({name!r}, (2, 32))", (2, 32)),
    "reward_model": ("REWARD_MODEL_DATA_DIR", "data.load_pair_rows({name!r})", (50,)),  # a, b, label, rater
    "distillation": ("DISTILLATION_DATA_DIR", "data.load_prompts({name!r})", (12,)),  # prompts only
}


def tokens(n: int, seed: int = 0, row: tuple = (SEQ_LEN,)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *row), dtype=np.uint8)


def both_formats(folder: Path, arr: np.ndarray) -> None:
    """`arr` as a raw file `fuzz_raw.u8` (the format the committed tiers hold) and as the `datasets`
    folders `fuzz_arrow/` and `train_quick/`, one SHA256SUMS listing them all."""
    split = ArrowSplit({"tokens": arr})
    write_sums(folder, write_splits(folder, {"fuzz_raw.u8": arr, "fuzz_arrow": split, "train_quick": split}))


def load(task: str, name: str) -> str:
    return REPOS[task][1].format(name=name)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from fork_server(tmp_path_factory)


@pytest.fixture
def in_repo(server):
    """in_repo(task, data_dir, code): `code` run in a fresh process with `task`'s repo modules
    importable, as the meter runs them (a child of this module's fork server, tests/forkserver.py)."""

    def run(task: str, data_dir: Path, code: str) -> subprocess.CompletedProcess:
        repo = PROJECT_ROOT / "repos_frozen" / task
        env = {**os.environ, REPOS[task][0]: str(data_dir), "PYTHONPATH": str(repo)}
        env.pop("AI4AI_METER", None)
        return server.run(repo, env, code=code, timeout=300)

    return run


def test_the_gpu_tiers_are_the_tasks_gpu_scales():
    from ai4ai.core import hidden, task

    assert hidden.GPU_TIERS == task.GPU_SCALES
    assert set(hidden.train_split("full", tokens(2))) == {"train_full"}
    assert set(hidden.train_split("smoke", tokens(2))) == {"train_smoke.u8"}


def test_an_arrow_split_is_the_same_bytes_every_write_and_datasets_reads_it_back(tmp_path):
    import datasets

    arr = tokens(3000)
    a = write_splits(tmp_path / "a", {"train_x": ArrowSplit({"tokens": arr})})
    b = write_splits(tmp_path / "b", {"train_x": ArrowSplit({"tokens": arr})})
    assert a == b
    assert {"train_x/state.json", "train_x/dataset_info.json"} <= set(a)
    assert any(k.startswith("train_x/data-") and k.endswith(".arrow") for k in a)
    on_disk = {p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    assert on_disk == set(a)  # every file written is listed, and nothing else was written
    fingerprint = json.loads((tmp_path / "a" / "train_x" / "state.json").read_text())["_fingerprint"]
    other = write_splits(tmp_path / "c", {"train_x": ArrowSplit({"tokens": tokens(3000, seed=1)})})
    assert json.loads((tmp_path / "c" / "train_x" / "state.json").read_text())["_fingerprint"] != fingerprint
    assert other["train_x/state.json"] != a["train_x/state.json"]
    ds = datasets.load_from_disk(str(tmp_path / "a" / "train_x")).with_format("numpy")
    assert len(ds) == 3000 and ds.features["tokens"].length == SEQ_LEN
    assert np.array_equal(np.asarray(ds[:]["tokens"]), arr)
    # the harness's cache check reads the nested names: a changed byte is found
    write_sums(tmp_path / "a", a)
    assert verify(tmp_path / "a") == []
    shard = next((tmp_path / "a" / "train_x").glob("*.arrow"))
    raw = bytearray(shard.read_bytes())
    raw[-100] ^= 1
    shard.write_bytes(bytes(raw))
    assert verify(tmp_path / "a") == [f"train_x/{shard.name} does not match its sha256"]


@pytest.mark.parametrize(
    "columns, why",
    [
        ({}, "at least one column"),
        ({"t": np.zeros(4, np.uint8)}, "an \\[N, ...\\] array"),
        ({"t": np.zeros((3, 0), np.uint8)}, "at least one value"),
        ({"a": np.zeros((3, 2), np.uint8), "b": np.zeros((4, 2), np.uint8)}, "differ in length"),
    ],
)
def test_a_malformed_arrow_split_is_refused(tmp_path, columns, why):
    with pytest.raises(ValueError, match=why):
        write_splits(tmp_path, {"s": ArrowSplit(columns)})


# Every index shape, sign, size and dtype against the raw tensor's own indexing: equal rows or an
# IndexError from both, for a 1-D integer index; an IndexError from the datasets folder for any other.
FUZZ = r"""
import json, torch, data
raw, arrow = LOAD_RAW, LOAD_ARROW
assert isinstance(raw, torch.Tensor) and isinstance(arrow, data.ArrowRows), (type(raw), type(arrow))
n = len(raw)
assert len(arrow) == n and arrow.shape == tuple(raw.shape) and len(arrow.chunks) >= 3  # record batches of 1000 rows
g = torch.Generator().manual_seed(SEED)
kinds = {"same": 0, "both_refused": 0, "other_refused": 0}
for trial in range(400):
    dtype = [torch.int8, torch.int16, torch.int32, torch.int64][trial % 4]
    size = int(torch.randint(0, 70, (1,), generator=g))
    span = [n, 2 * n, 3, 1500, n + 1][trial % 5]
    lo, hi = max(-span, torch.iinfo(dtype).min), min(span, torch.iinfo(dtype).max)
    idx = torch.randint(lo, hi + 1, (size,), generator=g).to(dtype)
    try:
        want = raw[idx]
    except IndexError:
        want = None
    try:
        got = arrow[idx]
    except IndexError:
        got = None
    assert (want is None) == (got is None), (idx, want is None)
    if want is None:
        kinds["both_refused"] += 1
        continue
    assert got.dtype == torch.int64 and got.shape == want.shape and torch.equal(got, want), idx
    kinds["same"] += 1
others = [torch.zeros((2, 3), dtype=torch.int64), torch.tensor(5), torch.tensor([0.0, 1.0]),
          torch.tensor([True, False] * (n // 2)), torch.zeros((0, 1), dtype=torch.int64), torch.tensor([1 + 0j]),
          torch.tensor([1, 2], dtype=torch.uint8)]   # uint8: a mask to torch's indexing, so refused
for idx in others:
    try:
        arrow[idx]
    except IndexError:
        kinds["other_refused"] += 1
print("RESULT " + json.dumps(kinds))
"""


@pytest.mark.parametrize("task", list(REPOS))
def test_the_repo_serves_the_same_rows_from_a_datasets_folder_as_from_the_raw_split(tmp_path, in_repo, task):
    seed = list(REPOS).index(task)
    both_formats(tmp_path, tokens(2601, seed, REPOS[task][2]))
    code = FUZZ.replace("LOAD_RAW", load(task, "fuzz_raw")).replace("LOAD_ARROW", load(task, "fuzz_arrow"))
    r = in_repo(task, tmp_path, code.replace("SEED", str(seed)))
    assert r.returncode == 0, r.stderr[-3000:]
    kinds = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert kinds["same"] > 80 and kinds["both_refused"] > 150 and kinds["other_refused"] == 7, kinds


METERED = {
    "optimizer": "s = data.TrainingSplit('quick'); x = s.get(torch.tensor([0, 3, -1])); store = s.sequences",
    "sft": "s = data.TrainingSplit('quick'); x = s.get(torch.tensor([0, 3, -1])); store = s.sequences",
    "dpo": "s = data.PairSplit('quick'); x, _, _ = s.get(torch.tensor([0, 3, -1])); store = s.pairs",
    "reward_model": "s = data.PreferencePairs('quick'); a, b, label, rater = s.get(torch.tensor([0, 3, -1]))\n"
    "x = torch.cat([a, b, label[:, None].long(), rater[:, None]], 1); store = s.pairs",
    "distillation": "s = data.TrainingSplit('quick'); x = s.get(torch.tensor([0, 3, -1])); store = s.prompts",
}


@pytest.mark.parametrize("task", list(REPOS))
def test_the_training_split_class_meters_a_datasets_folder_as_it_meters_a_tensor(tmp_path, in_repo, task):
    arr = tokens(64, 0, REPOS[task][2])
    both_formats(tmp_path, arr)
    code = f"import torch, data\n{METERED[task]}\n"
    code += "assert isinstance(store, data.ArrowRows)\nprint('LEN', len(s), 'SERVED', s.served, tuple(x.shape), int(x[0, 0]))"
    r = in_repo(task, tmp_path, code)
    assert r.returncode == 0, r.stderr[-3000:]
    row = REPOS[task][2][-1]
    assert f"LEN 64 SERVED 3 (3, {row}) {int(arr.reshape(64, -1)[0, 0])}" in r.stdout, r.stdout


def _tamper(folder: Path, how: str) -> None:
    split = folder / "train_quick"
    shard = next(split.glob("*.arrow"))
    if how == "byte":
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 2] ^= 0x40
        shard.write_bytes(bytes(raw))
    elif how == "extra_file":
        (split / "data-00001-of-00001.arrow").write_bytes(shard.read_bytes())
    elif how == "missing_file":
        (split / "dataset_info.json").unlink()
    elif how == "unlisted":
        write_sums(folder, {k: v for k, v in read_sums(folder).items() if not k.startswith("train_quick/")})
    elif how == "renamed":
        shard.rename(split / ("x" + shard.name))
    elif how == "state":  # a state.json pointing at another file
        state = json.loads((split / "state.json").read_text())
        state["_data_files"] = [{"filename": "../fuzz_raw.u8"}]
        (split / "state.json").write_text(json.dumps(state))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("task", list(REPOS))
@pytest.mark.parametrize("how", ["byte", "extra_file", "missing_file", "unlisted", "renamed", "state"])
def test_a_datasets_folder_that_differs_from_its_listing_is_refused(tmp_path, in_repo, how, task):
    both_formats(tmp_path, tokens(64, 0, REPOS[task][2]))
    _tamper(tmp_path, how)
    r = in_repo(task, tmp_path, "import data; " + load(task, "train_quick"))
    assert r.returncode != 0 and "RuntimeError" in r.stderr and "SHA256SUMS" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("task_name", list(REPOS))
def test_prepare_writes_the_gpu_tiers_split_as_a_datasets_folder(tmp_path, monkeypatch, task_name):
    """The grader's own prepare at `quick` (CPU sizes): a `datasets` folder in the cache, named by
    data.writes' `train_{scale}/`, verified on reuse, readable by `datasets`; the graded instance's
    (where the task has one) holds other rows; ci keeps its raw file."""
    import datasets

    from ai4ai.core.hidden import load_grader

    monkeypatch.setenv("AI4AI_SHRINK", "1")
    task = load_task(task_name)
    assert "train_{scale}/" in task.prepare_writes
    dest = preparing.materialize_cached(task, "quick", tmp_path)
    sums = read_sums(dest)
    assert preparing.written("train_quick/", sums) and not preparing.written("train_full/", sums)
    assert "val.u8" in sums and not any(k.startswith("train_") and k.endswith(".u8") for k in sums)
    shards = sorted(k for k in sums if k.startswith("train_quick/") and k.endswith(".arrow"))
    assert shards and preparing.cache_state(task, "quick", tmp_path).state == "complete"
    rows = datasets.load_from_disk(str(dest / "train_quick"))
    assert rows.features["tokens"].length == int(np.prod(REPOS[task_name][2])) and len(rows) > 0
    if task.grading_data:
        graded = read_sums(preparing.grading_mounts(task, "quick", tmp_path)[0][0].host)
        assert shards == sorted(k for k in graded if k.endswith(".arrow"))
        assert all(graded[k] != sums[k] for k in shards)  # another instance of the source: other rows
    committed = load_grader(task_name, task.grader).materialize("ci", tmp_path / "ci")
    assert "train_ci.u8" in committed and not any(k.startswith("train_ci/") for k in committed)
