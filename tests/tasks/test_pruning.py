"""The pruning task: contract, the validity rules of the hidden grader (sparsity over the prunable
tensors, kept weights and every other tensor bit for bit as in the dense model), its metric on
hand-made models (dense = best, uniform = V, degenerate prunings not above the shipped baseline),
the invalid path through the real evaluation worker, and one ci seed end to end."""

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis.task_checks import Report, contract_checks
from ai4ai.core.hidden import load_grader
from ai4ai.core.task import load_task

from . import calibrated

TASK = "pruning"
V = 32


@pytest.fixture(scope="module")
def grader():
    return load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)


@pytest.fixture(scope="module")
def G(grader):
    import sys

    return sys.modules[grader.__name__ + ".grader"]


@pytest.fixture(scope="module")
def text(grader):
    return grader.split("validation")[:128]  # small and fast; the rules do not depend on the split


def _dense(G):
    return G.dense_model("dense_small")


def _magnitude(G, sparsity=0.75):
    """Uniform per-tensor magnitude pruning, as the shipped algorithm does it."""
    m = _dense(G)
    with torch.no_grad():
        for n, w in m.named_parameters():
            if G.is_prunable(n):
                keep = math.floor((1 - sparsity) * w.numel())
                order = torch.argsort(w.abs().flatten(), descending=True, stable=True)
                mask = torch.zeros(w.numel(), dtype=torch.bool)
                mask[order[:keep]] = True
                w.mul_(mask.view_as(w))
    return m


def _baseline_ppl() -> float:
    """The shipped algorithm's calibrated perplexity at smoke (current task version)."""
    return calibrated.baseline(TASK)


def test_task_composes_and_contract_checks_pass():
    task = load_task(TASK)
    assert task.metric.direction == "min" and task.metric.transform == "neg_log" and task.metric.best == "dense"
    assert task.deterministic
    assert task.is_editable("train.py") and task.is_editable("prune.py") and task.is_editable("algorithm/x.py")
    for f in ("model.py", "prepare.py", "evaluate.py", "config.py", "artifacts/dense_small.safetensors"):
        assert not task.is_editable(f)
    rep = Report(lines=[])
    contract_checks(task, rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_committed_data_regenerates_and_matches_config(grader, G, tmp_path):
    data = PROJECT_ROOT / "repos_frozen" / TASK / "data"
    assert grader.split("validation").tobytes() == (data / "val.u8").read_bytes()
    sums = G.write_repo_data(tmp_path)
    for name in sums:
        assert (data / name).read_bytes() == (tmp_path / name).read_bytes(), name
    listed = dict(reversed(line.split()) for line in (data / "SHA256SUMS").read_text().splitlines())
    assert listed == sums
    # the grader's own constants agree with the repo's protected config
    import ast

    cfg = ast.parse((PROJECT_ROOT / "repos_frozen" / TASK / "config.py").read_text())
    consts = {
        t.id: ast.literal_eval(n.value)
        for n in cfg.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id in ("SPARSITY", "PRUNABLE", "SEQ_LEN", "VOCAB")
    }
    assert consts == {"SPARSITY": G.SPARSITY, "PRUNABLE": G.PRUNABLE, "SEQ_LEN": G.SEQ_LEN, "VOCAB": G.VOCAB}


def test_dense_artifact_is_pinned_by_the_grader(G):
    import hashlib

    art = PROJECT_ROOT / "repos_frozen" / TASK / "artifacts"
    raw = (art / "dense_small.safetensors").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == G.DENSE_SHA256["dense_small"]
    assert f"{G.DENSE_SHA256['dense_small']}  dense_small.safetensors" in (art / "SHA256SUMS").read_text()


def test_dense_model_scores_the_best_value(grader, G, text):
    dense = _dense(G)
    # the dense model itself is not sparse: it is invalid as a submission ...
    assert math.isnan(grader.evaluate(dense, text, {"scale": "smoke"}))
    # ... but its perplexity is the 1.0 anchor, and it is far better than uniform
    best = grader.best_attainable(text, None)
    assert 1.0 < best < V / 2
    assert best == pytest.approx(math.exp(float(G._nll(dense, text).mean())), rel=1e-12)


def test_uninformative_model_scores_vocabulary_size(grader, G, text):
    m = grader.uninformative(_dense(G))
    assert all(not torch.any(p) for p in m.parameters())
    assert grader.evaluate(m, text, None) == pytest.approx(V, rel=1e-9)


def test_magnitude_pruning_is_valid_and_between_the_anchors(grader, G, text):
    m = _magnitude(G)
    assert G.check_pruned(m, {"scale": "smoke"}) == []
    ppl = grader.evaluate(m, text, {"scale": "smoke"})
    assert grader.best_attainable(text, None) < ppl < V
    raw, se = grader.evaluate_with_noise(m, text, {"scale": "ci"})
    assert raw == ppl and 0 < se < 0.05


def test_not_sparse_enough_is_rejected(grader, G, text):
    m = _magnitude(G, sparsity=0.74)
    problems = G.check_pruned(m, {"scale": "smoke"})
    assert len(problems) == 1 and "nonzero" in problems[0]
    assert math.isnan(grader.evaluate(m, text, {"scale": "smoke"}))
    assert all(math.isnan(x) for x in grader.evaluate_with_noise(m, text, {"scale": "smoke"}))
    # exactly at the cap is valid; one weight over it is not (the count is global over the prunable tensors)
    m = _magnitude(G)
    params = {n: p for n, p in m.named_parameters() if G.is_prunable(n)}
    total = sum(p.numel() for p in params.values())
    nonzero = sum(int(torch.count_nonzero(p)) for p in params.values())
    allowed = math.floor(0.25 * total)
    assert nonzero <= allowed
    name = "transformer.h.0.mlp.c_fc.weight"
    w, dense = params[name], G.dense_state("dense_small")[name]
    zeros = ((w == 0) & (dense != 0)).nonzero()
    with torch.no_grad():
        for i, j in zeros[: allowed - nonzero].tolist():
            w[i, j] = dense[i, j]  # un-prune: restore the dense value
    assert G.check_pruned(m, {"scale": "smoke"}) == []
    with torch.no_grad():
        i, j = zeros[allowed - nonzero].tolist()
        w[i, j] = dense[i, j]
    assert math.isnan(grader.evaluate(m, text, {"scale": "smoke"}))


def test_non_uniform_allocation_is_allowed(grader, G, text):
    """Sparsity is a budget over all prunable tensors together (OWL-style layer ratios are legal)."""
    m = _dense(G)
    names = [n for n, _ in m.named_parameters() if G.is_prunable(n)]
    with torch.no_grad():
        for n, w in m.named_parameters():
            if n in names:
                s = 0.65 if ".h.0." in n else 0.78  # layer 0 denser, the rest sparser
                keep = math.floor((1 - s) * w.numel())
                order = torch.argsort(w.abs().flatten(), descending=True, stable=True)
                flat = torch.zeros(w.numel(), dtype=torch.bool)
                flat[order[:keep]] = True
                w.mul_(flat.view_as(w))
    nz = sum(int(torch.count_nonzero(p)) for n, p in m.named_parameters() if n in names)
    tot = sum(p.numel() for n, p in m.named_parameters() if n in names)
    if nz <= math.floor(0.25 * tot):
        assert G.check_pruned(m, {"scale": "smoke"}) == []
        assert math.isfinite(grader.evaluate(m, text, {"scale": "smoke"}))


@pytest.mark.parametrize(
    "name",
    [
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.h.1.ln_1.weight",
        "transformer.h.2.attn.c_attn.bias",
        "transformer.h.3.mlp.c_proj.bias",
        "transformer.ln_f.bias",
    ],
)
def test_changing_a_non_prunable_tensor_is_rejected(grader, G, text, name):
    m = _magnitude(G)
    p = dict(m.named_parameters())[name]
    with torch.no_grad():
        flat = p.view(-1)
        flat[0] = torch.nextafter(flat[0], torch.tensor(math.inf))  # one ulp
    problems = G.check_pruned(m, {"scale": "smoke"})
    assert len(problems) == 1 and name in problems[0]
    assert math.isnan(grader.evaluate(m, text, {"scale": "smoke"}))


@pytest.mark.parametrize("change", ["one ulp", "scaled", "sign"])
def test_changing_a_kept_weight_is_rejected(grader, G, text, change):
    """Pruning chooses the mask; a kept weight keeps its dense value bit for bit (pruned ones may be -0.0)."""
    m = _magnitude(G)
    assert G.check_pruned(m, {"scale": "smoke"}) == []  # magnitude's zeros include -0.0
    name = "transformer.h.2.mlp.c_proj.weight"
    w = dict(m.named_parameters())[name]
    k = int(torch.nonzero(w.view(-1))[0])
    with torch.no_grad():
        x = w.view(-1)[k]
        w.view(-1)[k] = {"one ulp": torch.nextafter(x, torch.tensor(math.inf)), "scaled": 1.5 * x, "sign": -x}[change]
    problems = G.check_pruned(m, {"scale": "smoke"})
    assert len(problems) == 1 and name in problems[0] and "kept weights" in problems[0]
    assert math.isnan(grader.evaluate(m, text, {"scale": "smoke"}))


def test_sign_of_zero_counts_bit_for_bit(grader, G, text):
    m = _magnitude(G)
    p = dict(m.named_parameters())["transformer.ln_f.bias"]
    with torch.no_grad():
        p.view(-1)[0] = 0.0 if p.view(-1)[0].item() != 0.0 or math.copysign(1, p.view(-1)[0].item()) < 0 else -0.0
    assert G.check_pruned(m, {"scale": "smoke"})


def test_degenerate_prunings_do_not_beat_the_shipped_baseline(grader, G, text):
    base = _baseline_ppl()
    cases = {}
    m = _dense(G)  # every prunable weight pruned to zero
    with torch.no_grad():
        for n, w in m.named_parameters():
            if G.is_prunable(n):
                w.zero_()
    cases["all prunable zero"] = m
    m = _magnitude(G)  # survivors collapsed to one constant
    with torch.no_grad():
        for n, w in m.named_parameters():
            if G.is_prunable(n):
                w.copy_((w != 0) * 0.01)
    cases["constant survivors"] = m
    m = _magnitude(G)  # survivors blown up
    with torch.no_grad():
        for n, w in m.named_parameters():
            if G.is_prunable(n):
                w.mul_(1e4)
    cases["huge survivors"] = m
    m = _magnitude(G)  # pruned ones given back a small value
    with torch.no_grad():
        for n, w in m.named_parameters():
            if G.is_prunable(n):
                w.add_((w == 0) * 1e-3)
    cases["pruned set to epsilon"] = m
    m = _magnitude(G)  # non-finite survivor: no finite perplexity
    with torch.no_grad():
        dict(m.named_parameters())["transformer.h.0.mlp.c_fc.weight"].view(-1)[
            int(torch.nonzero(dict(m.named_parameters())["transformer.h.0.mlp.c_fc.weight"].view(-1))[0])
        ] = math.nan
    cases["nan survivor"] = m
    for what, model in cases.items():
        ppl = grader.evaluate(model, text, {"scale": "smoke"})
        assert not (math.isfinite(ppl) and ppl < base), (what, ppl, base)


def test_invalid_checkpoints_are_invalid_through_the_evaluation_worker(G, tmp_path):
    """The real worker (pristine model code, strict load): NaN from evaluate marks the candidate invalid;
    a valid candidate next to it is chosen."""
    from ai4ai.grading.evaluation import EvalSpec, run_worker

    task = load_task(TASK)
    paths = []
    for i, mutate in enumerate(["too_dense", "embedding", "valid"]):
        m = _magnitude(G, 0.5 if mutate == "too_dense" else 0.75)
        if mutate == "embedding":
            with torch.no_grad():
                dict(m.named_parameters())["transformer.wte.weight"].view(-1)[0] += 1.0
        p = tmp_path / f"ckpt_{i + 1:08d}.safetensors"
        save_file({k: v.detach().contiguous() for k, v in m.named_parameters()}, str(p))
        paths.append(str(p))
    spec = EvalSpec(
        task=TASK,
        repo=str(task.repo),
        grader=str(task.grader),
        model=task.model,
        scale="ci",
        candidates=paths,
        direction="min",
        transform="neg_log",
        metadata_keys=[],
        device="cpu",
        threads=1,
    )
    out = run_worker(spec, tmp_path / "work")
    valid = {c["name"]: c["valid"] for c in out["candidates"]}
    assert valid == {
        "ckpt_00000001.safetensors": False,
        "ckpt_00000002.safetensors": False,
        "ckpt_00000003.safetensors": True,
    }
    assert out["chosen"] == "ckpt_00000003.safetensors" and math.isfinite(out["test_metric"])
    log = (tmp_path / "work" / "eval.log").read_text()
    assert "nonzero weights" in log and "transformer.wte.weight is not prunable" in log


def test_one_ci_seed_end_to_end(compose_cfg, tmp_path):
    cfg = compose_cfg("config", ["task=pruning", "scale=ci", "agent=baseline"])
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    assert abs(r["score"] - 0.1) < 0.03, r["score_per_seed"]
    assert r["anchors"]["best"] < r["raw"]["mean"] < r["anchors"]["no_info"] == pytest.approx(V)
