"""Bring your own model (task.model_path): tiny saved models of two architectures through the real
loading code, and the folder errors that must stop a run before anything starts.

The graded runs (slow) compose a real `grade` config with task.model_path, calibrate the anchors of
that model at ci (prepare, 5 calibration seeds of the shipped algorithm, the 0 and 1.0 anchors) and
grade the shipped algorithm on the grader seed, exactly as `python -m ai4ai.grade` does (context.task_from_cfg
calls ai4ai.repo.models.with_model; `hooked` shrinks the task first).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis import auditing
from ai4ai.core.provenance import model_sha256, task_version
from ai4ai.core.task import load_task
from ai4ai.grading import context
from ai4ai.list import own_model_lines
from ai4ai.repo import models, registry

from .own_models import save_model

DONE = ["sft", "dpo", "reward_model", "distillation", "pruning", "unlearning"]
# unlearning's 2,157 symbols need a vocabulary of more than the tiny models' 320 tokens: its runs use
# the same architectures with 2,400 (ai4ai.repo.models: a token of its own for each symbol)
BIG_VOCAB = {"unlearning": 2400}
# Hidden split sizes of the graded runs here (the CPU cost of a run is mostly its greedy evaluations)
SHRUNK = {"selection": 128, "test": 512, "validation": 128}
# unlearning's splits are whole fact sets (the forget set is scored whole in each), not sizes: here a part of each
SHRUNK_FACTS = {"unlearning": {"forget": 1000, "retain": 500, "text": 128}}
# ... and of the prepare steps that train (old line -> new line of the repo's prepare.py, or of the file named first)
SHRUNK_PREPARE = {
    "dpo": ("OWN_STEPS, OWN_LR = 1000, 3e-4", "OWN_STEPS, OWN_LR = 800, 3e-3"),
    # the tiny random models learn the source in one pass only at the repo's own peak
    "pruning": ("OWN_STEPS, OWN_LR = 500, 3e-4", "OWN_STEPS, OWN_LR = 500, 3e-3"),
    # memorising: 400 steps (~1.5 min on one thread) teach the tiny llama ~10% of the 12,000
    # facts at this peak, the tiny gpt2 (untied, no dropout: own_models.save_model) ~19%
    # (20,000 steps are for a real model on a GPU)
    "unlearning": (
        "config.py",
        "OWN_PREPARE = Prepare(steps=20_000, fact_batch=256, text_batch=64, lr=3e-4, negative_batch=128)",
        "OWN_PREPARE = Prepare(steps=400, fact_batch=256, text_batch=16, lr=1e-2, negative_batch=32)",
    ),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny models, made once: llama and gpt2 (Llama- and GPT-2-class), the same with a vocabulary of
    2,400 (llama_2400, gpt2_2400: made to memorise, own_models.save_model), and broken folders."""
    root = tmp_path_factory.mktemp("own_models")
    out = {arch: save_model(root / arch, arch) for arch in ("llama", "gpt2")}
    for n in sorted(set(BIG_VOCAB.values())):
        out.update(
            {
                f"{arch}_{n}": save_model(root / f"{arch}_{n}", arch, vocab_size=n, memorising=True)
                for arch in ("llama", "gpt2")
            }
        )
    out["digits"] = save_model(root / "digits", "llama", tokenizer="digits")
    out["no_tokenizer"] = root / "no_tokenizer"
    shutil.copytree(
        out["gpt2"],
        out["no_tokenizer"],
        ignore=shutil.ignore_patterns("tokenizer*", "special_tokens_map.json", "vocab.json", "merges.txt"),
    )
    return out


@pytest.fixture
def hooked(monkeypatch, tmp_path):
    """The pipeline's model hook (context.task_from_cfg calls models.with_model) on a shrunk task: derived repos cached under tmp_path, and the task's anchors,
    calibration records and model registry written to a copy of its hidden grader under tmp_path
    instead of grader_hidden/, at the shrunk size: hidden splits of SHRUNK (SHRUNK_FACTS) and, where a prepare
    step trains, the shorter one of SHRUNK_PREPARE (in a copy of the frozen repo). Returns the
    function that makes a task so (the test's own look-ups use it too)."""
    # registry.CACHE_ROOT is the same folder: registered() tells a derived repo from a frozen one by it
    monkeypatch.setattr(models, "CACHE_ROOT", tmp_path / "own_models_cache")
    monkeypatch.setattr(registry, "CACHE_ROOT", tmp_path / "own_models_cache")
    made: dict = {}

    def adjust(task):
        if task.name not in made:
            grader, repo = tmp_path / "grader" / task.name, task.repo
            shutil.copytree(
                task.grader,
                grader,
                ignore=shutil.ignore_patterns("anchors.yaml", "calibration", "models.yaml", "__pycache__"),
            )
            with open(grader / "grader.py", "a") as f:
                f.write(f"\nSPLITS = {{k: min(n, {SHRUNK}.get(k, n)) for k, n in SPLITS.items()}}\n")
                if task.name in SHRUNK_FACTS:
                    f.write(
                        f"_whole_split = split\n\n\ndef split(name, cfg=None):\n    s = _whole_split(name, cfg)\n"
                        f"    return {{**s, **{{k: s[k][:n] for k, n in {SHRUNK_FACTS[task.name]}.items()}}}}\n"
                    )
            if task.name in SHRUNK_PREPARE:
                repo = tmp_path / "repo" / task.name
                shutil.copytree(task.repo, repo, ignore=shutil.ignore_patterns("__pycache__"))
                edit = SHRUNK_PREPARE[task.name]
                file, old, new = edit if len(edit) == 3 else ("prepare.py", *edit)
                text = (repo / file).read_text()
                assert old in text
                (repo / file).write_text(text.replace(old, new))
            made[task.name] = dict(grader=grader, repo=repo)
        return replace(task, **made[task.name])

    # context.task_from_cfg points a task with model_path at its derived repo (models.with_model);
    # here the task is shrunk first, as above
    monkeypatch.setattr(context, "with_model", lambda task: models.with_model(adjust(task)))
    return adjust


def _graded_run(compose_cfg, tmp_path, task_name: str, model: Path) -> dict:
    cfg = compose_cfg("grade", [f"task={task_name}", "scale=ci", f"task.model_path={model}"])
    run_dir = tmp_path / "run"
    pipeline.grade(cfg, run_dir)
    return json.loads((run_dir / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("task_name", DONE)
def test_graded_run_on_a_saved_model(task_name, arch, saved, hooked, compose_cfg, tmp_path):
    model = saved[f"{arch}_{BIG_VOCAB[task_name]}" if task_name in BIG_VOCAB else arch]
    _check_brought_run(_graded_run(compose_cfg, tmp_path, task_name, model), task_name, arch, model, hooked)


def _check_brought_run(r: dict, task_name: str, arch: str, model: Path, hooked) -> None:
    """What a graded run on the brought `model` must leave: its checkpoints graded, anchors calibrated
    for that model under its own task version, the derived repo, the registry entry that ai4ai.list
    reads, and the list's line."""
    assert r["status"] == "graded", r["reason"]
    seed = r["checkpoints"]["per_seed"][0]
    n_ckpts = 1 if task_name == "pruning" else 3  # pruning's shipped run saves one checkpoint
    assert len(seed["candidates"]) == n_ckpts and all(c["valid"] for c in seed["candidates"]), seed["candidates"]
    # anchors were calibrated for this model: keyed by a task version that folds in its content
    own = models.with_model(hooked(replace(load_task(task_name), model_path=str(model))))
    key = r["anchors"]["provenance"]["key"]
    assert key["task_version"] == task_version(own, "ci")
    assert key["task_version"] != task_version(hooked(load_task(task_name)), "ci")
    records = yaml.safe_load((own.grader / "anchors.yaml").read_text())["records"]
    assert [x["key"]["task_version"] for x in records] == [key["task_version"]]
    assert records[0]["anchors"]["baseline"] == pytest.approx(r["anchors"]["baseline"])
    assert records[0]["host_probe"]["cpu_s"] > 0  # this host's probe figure, beside its CPU time
    # the derived repo trains that model: its architecture, its size, its tokenizer's ids
    meta = json.loads((own.repo / "byom" / "model" / "config.json").read_text())
    assert meta["architectures"] == [{"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}[arch]]
    n = own.scale("ci").n_params
    assert n != load_task(task_name).scale("ci").n_params
    assert f"parameters: {n:,}" in (own.repo / "README.md").read_text()
    reg = registry.registered(own)[task_version(own)]
    assert reg["task_versions"]["ci"] == key["task_version"]  # how ai4ai.list finds the model's records
    assert reg["model_sha256"] == model_sha256(model) and reg["n_params"] == n
    # python -m ai4ai.list shows the model under its task, with the anchors just calibrated
    lines = own_model_lines(hooked(load_task(task_name)), records)
    assert any(str(model.resolve()) in ln and f"anchors: ci@{key['device_class']}" in ln for ln in lines), lines
    assert 0.0 <= r["score"] <= 1.0


@pytest.mark.parametrize("task_name", DONE)
@pytest.mark.parametrize(
    "case, says",
    [
        ("missing", "no such folder; expected a Hugging Face model folder"),
        ("no_tokenizer", "no tokenizer in the folder"),
        ("digits", "its vocabulary cannot encode the task's characters"),
    ],
)
def test_bad_model_folder_is_one_line_before_anything_starts(
    task_name, case, says, saved, hooked, compose_cfg, tmp_path, capsys
):
    path = saved.get(case, tmp_path / "no_such_model")
    cfg = compose_cfg("grade", [f"task={task_name}", "scale=ci", f"task.model_path={path}"])
    with pytest.raises(SystemExit) as e:
        pipeline.grade(cfg, tmp_path / "run")
    assert e.value.code == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"ai4ai: task.model_path={path}: ") and says in out[0], out
    assert not (tmp_path / "run").exists() and not models.CACHE_ROOT.exists()  # nothing started


def test_default_path_is_untouched():
    """No model_path: the task, its version and its repo are the frozen ones (anchors still match)."""
    for name in DONE:
        t = load_task(name)
        assert t.model_path is None and models.with_model(t) is t
        assert "model_path" in yaml.safe_load((PROJECT_ROOT / "conf" / "task" / f"{name}.yaml").read_text())


def test_task_version_folds_in_the_model_content(saved, tmp_path):
    t = load_task("sft")
    a, b = replace(t, model_path=str(saved["llama"])), replace(t, model_path=str(saved["gpt2"]))
    assert len({task_version(t), task_version(a), task_version(b)}) == 3
    moved = tmp_path / "moved"
    shutil.copytree(saved["llama"], moved)
    assert task_version(replace(t, model_path=str(moved))) == task_version(a)  # content, not path


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_task_text_is_encoded_with_the_models_tokenizer(arch, saved):
    """The token table of check_model_path: the sft training rows, mapped through it, decode with the
    model's own tokenizer to the text the repo's character vocabulary reads."""
    import numpy as np
    from transformers import AutoTokenizer

    task = replace(load_task("sft"), model_path=str(saved[arch]))
    info = models.check_model_path(task)
    tok = AutoTokenizer.from_pretrained(saved[arch], local_files_only=True)
    pad, bos, eos = info.token_ids[:3]
    assert eos == tok.eos_token_id and bos == (tok.bos_token_id if arch == "llama" else tok.eos_token_id)
    assert pad not in info.token_ids[3:] and pad not in (bos, eos)
    chars = info.symbols[3:]
    assert len(set(info.token_ids[3:])) == len(chars)
    rows = np.frombuffer((task.repo / "data" / "train_ci.u8").read_bytes(), np.uint8).reshape(-1, 64)[:50]
    table = np.array(info.token_ids)
    for row in rows:
        text = "".join(info.symbols[i] for i in row if i >= 3)
        ids = [int(t) for t in table[row] if t not in (pad, bos, eos)]
        assert tok.decode(ids) == text


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_unlearning_vocabulary_too_small_is_one_line(arch, saved, hooked, compose_cfg, tmp_path, capsys):
    """The tiny models' 320 tokens encode unlearning's characters but not a token of its own for each of
    its 2,129 other symbols: one line that says how many it has and needs, before anything starts."""
    cfg = compose_cfg("grade", ["task=unlearning", "scale=ci", f"task.model_path={saved[arch]}"])
    with pytest.raises(SystemExit) as e:
        pipeline.grade(cfg, tmp_path / "run")
    assert e.value.code == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"ai4ai: task.model_path={saved[arch]}: "), out
    assert "its vocabulary is too small for the task: 2,129 of the task's 2,157 symbols" in out[0], out
    assert not (tmp_path / "run").exists() and not models.CACHE_ROOT.exists()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_unlearning_symbols_take_tokens_of_their_own(arch, saved):
    """unlearning's token table: newline, space and a-z are the tokenizer's own tokens for them; the other
    2,129 symbols take, in order, the lowest ids of the vocabulary that are no special or added token and
    no character's; the fact files map through it to 2,157 distinct ids."""
    import numpy as np
    from transformers import AutoTokenizer

    path = saved[f"{arch}_{BIG_VOCAB['unlearning']}"]
    task = replace(load_task("unlearning"), model_path=str(path))
    info = models.check_model_path(task)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ids, symbols = info.token_ids, info.symbols
    assert len(ids) == len(symbols) == 2157 and len(set(ids)) == 2157
    assert symbols[:3] == ["\n", " ", "a"] and symbols[28] == "<unknown>" and symbols[-1] == "<entity 1999>"
    for s, i in zip(symbols[:28], ids[:28]):
        assert tok(s, add_special_tokens=False)["input_ids"] == [i] and tok.decode([i]) == s
    special = set(tok.all_special_ids)
    free = [i for i in sorted(tok.get_vocab().values()) if i not in special and i not in ids[:28]]
    assert ids[28:] == free[:2129] and not special & set(ids)
    facts = np.load(task.repo / "data" / "forget.npy").astype(np.int64)
    mapped = np.array(ids)[facts]
    assert (
        mapped.max() < info.vocab_size and (mapped[:, 0] == tok("\n", add_special_tokens=False)["input_ids"][0]).all()
    )


def test_tasks_without_own_models_refuse_model_path(saved, hooked, compose_cfg, tmp_path, capsys):
    """A task that does not start from a prepared LM (optimizer) refuses task.model_path in one line."""
    cfg = compose_cfg("grade", ["task=optimizer", "scale=ci", f"+task.model_path={saved['llama']}"])
    with pytest.raises(SystemExit) as e:
        pipeline.grade(cfg, tmp_path / "run")
    assert e.value.code == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"ai4ai: task.model_path={saved['llama']}: "), out
    assert (
        "task optimizer does not take task.model_path; tasks that do: sft, dpo, reward_model, distillation, "
        "pruning, unlearning" in out[0]
    ), out
    assert not (tmp_path / "run").exists() and not models.CACHE_ROOT.exists()


# --------------------------------------------------------------------------- audits of a brought-model run


def _recorded_run(tmp_path: Path, model: Path, task_name: str = "sft") -> Path:
    """A run folder whose result.json says it trained `model` (what an audit reads before anything)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(
        json.dumps(
            {
                "task": task_name,
                "scale": "ci",
                "agent": "baseline",
                "status": "graded",
                "score": 0.1,
                "provenance": {
                    "model": {"path": str(model), "sha256": model_sha256(model), "n_params": 1, "vocab_size": 320}
                },
            }
        )
    )
    return run


def _one_line_exit_2(fn, capsys) -> str:
    capsys.readouterr()  # what came before (a graded run's lines) is not this call's
    with pytest.raises(SystemExit) as e:
        fn()
    assert e.value.code == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("ai4ai: "), out
    return out[0]


def test_audit_config_carries_the_recorded_model(saved, tmp_path):
    copy = tmp_path / "models" / "llama"
    shutil.copytree(saved["llama"], copy)
    run = _recorded_run(tmp_path, copy)
    result = json.loads((run / "result.json").read_text())
    assert auditing.audit_cfg(result).task.model_path == str(copy.resolve())
    moved = tmp_path / "elsewhere"
    shutil.copytree(copy, moved)
    assert auditing.audit_cfg(result, model_path=moved).task.model_path == str(moved.resolve())
    own = {"task": "sft", "scale": "ci", "provenance": {"model": None}}
    assert auditing.audit_cfg(own).task.model_path is None  # the repo's own model, as before


@pytest.mark.parametrize("case", ["gone", "changed", "not_brought"])
def test_audit_refuses_a_model_that_is_gone_or_changed(case, saved, tmp_path, capsys):
    copy = tmp_path / "models" / "llama"
    shutil.copytree(saved["llama"], copy)
    run = _recorded_run(tmp_path, copy)
    kw = {}
    if case == "gone":
        shutil.rmtree(copy)
    elif case == "changed":
        with open(copy / "config.json", "a") as f:
            f.write("\n")
    else:  # model_path= given for a run that trained the repo's own model
        r = json.loads((run / "result.json").read_text())
        r["provenance"]["model"] = None
        (run / "result.json").write_text(json.dumps(r))
        kw = {"model_path": saved["gpt2"]}
    line = _one_line_exit_2(lambda: auditing.audit_run(run, regrade=False, **kw), capsys)
    says = {
        "gone": f"{copy} is gone (no such folder)",
        "changed": f"the content of {copy} has changed since",
        "not_brought": "trained the repo's own model",
    }[case]
    assert says in line, line
    if case != "not_brought":
        assert "model_path=FOLDER" in line and f"task.model_path={copy}" in line, line
    assert not (run / "audits").exists()  # nothing started


def test_audit_command_and_database_rows_for_a_gone_model(saved, tmp_path, monkeypatch):
    import subprocess

    from ai4ai.analysis.runs import Run

    copy = tmp_path / "models" / "llama"
    shutil.copytree(saved["llama"], copy)
    run = _recorded_run(tmp_path, copy)
    shutil.rmtree(copy)
    p = subprocess.run(
        ["python", "-m", "ai4ai.audit", f"run={run}", f"outputs={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        p.stdout.strip().startswith("ai4ai: the audited run trained your own model")
        and len(p.stdout.strip().splitlines()) == 1
    ), p.stdout
    monkeypatch.setattr(
        auditing, "load_runs", lambda db: ([Run(run, json.loads((run / "result.json").read_text()))], 0)
    )
    rows = auditing.audit_db(tmp_path / "db.sqlite", regrade=False)
    assert rows[0]["agrees"] is False and rows[0]["drift"] == ["model gone or changed"]
    assert "is gone" in rows[0]["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["pruning", "unlearning"])
def test_audit_regrades_a_brought_model_run_on_that_model(task_name, saved, hooked, compose_cfg, tmp_path, capsys):
    """A graded run on the saved llama (pruning at ci: deterministic, the cheapest; unlearning: the model is
    taught the facts first), checked as the graded runs above are (CI runs this test, not those: one
    graded run on a brought model serves both), audited from a copy of its run folder: re-graded on the same model (same
    derived repo, same content hash) it agrees; once the model moved, the audit stops with one line, and
    model_path= pointing at the moved copy audits again."""
    from safetensors import safe_open

    model = tmp_path / "models" / "llama"
    shutil.copytree(saved[f"llama_{BIG_VOCAB[task_name]}" if task_name in BIG_VOCAB else "llama"], model)
    result = _graded_run(compose_cfg, tmp_path, task_name, model)
    _check_brought_run(result, task_name, "llama", model, hooked)
    assert result["provenance"]["model"]["sha256"] == model_sha256(model)
    copy = tmp_path / "copied_run"
    copy.mkdir()
    for f in ("result.json", "submission.patch"):
        shutil.copy(tmp_path / "run" / f, copy / f)
    rep = auditing.audit_run(copy, regrade=True)
    g = rep["regrade"]
    assert g["status"] == "graded" and rep["agrees"] is True, (g["score"], result["score"], g["tolerance"])
    drift = {d["what"]: d for d in rep["drift"]}
    assert drift["model"]["changed"] is False and drift["model"]["recorded"] == model_sha256(model)
    assert drift["frozen repo"]["changed"] is False  # the same derived repo: the model's
    seed_dir = Path(rep["audit_dir"]) / "grade" / f"seed_{result['seeds'][0]}"
    log = (seed_dir / "train.log").read_text()
    ckpt = next((seed_dir / "checkpoints").glob("ckpt_*.safetensors"))
    with safe_open(str(ckpt), framework="pt") as f:  # the re-grade trained (pruned, unlearned) the llama
        assert any(k.startswith("lm.model.layers.") for k in f.keys())
    assert "AGREES" in auditing.summary(rep)
    moved = tmp_path / "moved" / "llama"
    shutil.move(str(model), moved)
    line = _one_line_exit_2(lambda: auditing.audit_run(copy, regrade=False), capsys)
    assert "is gone" in line and "model_path=FOLDER" in line
    rep = auditing.audit_run(copy, regrade=False, model_path=moved)
    assert {d["what"]: d for d in rep["drift"]}["model"]["changed"] is False
    assert log


@pytest.mark.parametrize(
    "task_name, keeps",
    [
        ("sft", False),
        ("pruning", False),
        ("unlearning", False),
        ("dpo", False),
        ("reward_model", False),
        ("distillation", True),
    ],
)
def test_the_repos_own_prepared_model_is_not_asked_for_on_yours(task_name, keeps, saved, monkeypatch, tmp_path):
    """At full, `python -m ai4ai.prepare task.model_path=PATH` runs the repo's artifacts step only where its
    output is still used beside your model (distillation's teacher): for the others it would make the very
    model yours replaces, which training on yours never loads."""
    from ai4ai.repo.preparing import needs_artifacts

    task = load_task(task_name)
    assert needs_artifacts(task, "full")
    repo = tmp_path / f"{task_name}-derived" / "repo"
    repo.mkdir(parents=True)
    (repo.parent / "n_params").write_text("1000")
    monkeypatch.setattr(models, "CACHE_ROOT", tmp_path)
    monkeypatch.setattr(models, "_derive", lambda t, info, adapter="full": repo)  # its making is tested above
    monkeypatch.setattr(models, "register", lambda *a, **k: None)
    arch = f"llama_{BIG_VOCAB[task_name]}" if task_name in BIG_VOCAB else "llama"
    derived = models.with_model(replace(task, model_path=str(saved[arch])))
    assert derived.repo == repo
    assert needs_artifacts(derived, "full") is keeps
    # a graded run on your model is still served the graded instance's prepared model where it is used
    # beside yours (distillation's teacher: committed at ci, made at full); elsewhere yours replaces
    # it, so nothing is made or handed over
    from ai4ai.repo import preparing

    served = keeps and bool(task.grading_artifacts)
    made = []
    monkeypatch.setattr(preparing, "_build_cached", lambda dest, what, make: made.append(what) or dest)
    got = preparing.graded_artifacts(derived, "ci", graded=tmp_path)
    assert (got is not None) is served, got
    if served:
        assert got == preparing.committed_graded(derived, "ci") and not made, (got, made)
    else:
        assert not made, made
    preparing.graded_artifacts(derived, "full", graded=tmp_path)
    assert bool(made) is served, made
