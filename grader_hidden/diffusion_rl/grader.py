"""Hidden grader of the `diffusion_rl` task: a hidden scorer of the reward's intent on secret-seed samples.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), materialize(scale, dest).

The metric, per sample x (the final image of the DDPM chain for prompt c, clipped to [-1, 1]):
    s(x, c) = P_h(c | x) * thin_c(x) * (1 - P_h(junk | x))
where P_h is the HIDDEN classifier (11 classes: the ten digits and "junk": noise, pixel-shuffled
digits, constants, faded digits, digits under heavy noise), trained on the other half of the
digits with a different architecture and seed than the visible scorer, and thin_c() is the
reward's stroke term for the prompt (same formula and thresholds). Samples come in batches of
256 from fixed secret noise seeds, batch i all for the digit i mod 10 (so every split weighs the
ten prompts equally); a batch whose mean pairwise distance is below DIVERSITY_FRACTION of that of
the real digits of its prompt is collapsed and scores 0; a non-finite sample scores 0. The raw
metric is the mean of s over the split: 1.0 is the reward's maximum (metric.best), noise samples
score about 0.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import torch
import yaml
from safetensors.torch import load_file, save_file

from ai4ai.core.hidden import shrunk, write_splits

HERE = Path(__file__).resolve().parent
SCORER_PATH = HERE / "hidden_scorer.safetensors"
N_STEPS, IMAGE_DIM = 20, 64
N_PROMPTS, JUNK = 10, 10
INK_THRESHOLDS = (0.22, 0.30, 0.23, 0.29, 0.24, 0.28, 0.25, 0.27, 0.26, 0.31)  # the reward's stroke term
INK_TEMPERATURE = 0.01  # (repo config.py)
VALIDATION_SEED = 20240601  # public: the repo's evaluate.py uses it
BATCH = 256
DIVERSITY_FRACTION = 0.4
SPLITS = {"selection": 2560, "test": 20480, "validation": 2560}  # samples: 1, 8 and 1 batches per prompt
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py): evaluation in seconds
    SPLITS = {"selection": BATCH, "test": 2 * BATCH, "validation": BATCH}


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def _seed64(seed: int, tag: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{tag}".encode()).digest()[:8], "little") & (2**63 - 1)


# --------------------------------------------------------------------------- data halves


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data.astype(np.uint8), d.target.astype(np.uint8)


def halves() -> tuple[np.ndarray, np.ndarray]:
    """Index arrays of half A (the repo's data/digits_a.u8) and half B (hidden scorer), secret split."""
    x, _ = _digits()
    perm = np.random.default_rng(_secrets()["digits_split"]).permutation(len(x))
    n_a = len(x) // 2
    return np.sort(perm[:n_a]), np.sort(perm[n_a:])


def materialize(scale: str, dest: Path) -> dict:
    """Write the repo's half of the digits (same file at every scale); return its sha256."""
    x, y = _digits()
    a, _ = halves()
    return write_splits(dest, {"digits_a.u8": np.concatenate([x[a], y[a, None]], axis=1).astype(np.uint8)})


# --------------------------------------------------------------------------- hidden scorer


class HiddenClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 11),
        )

    def forward(self, x):
        return self.net(x)


def _real_b() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _digits()
    _, b = halves()
    return torch.from_numpy(x[b].astype(np.float32)) / 8.0 - 1.0, torch.from_numpy(y[b].astype(np.int64))


def _junk(x: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """Off-domain images: noise, shuffled pixels, constants, faded digits, digits under heavy noise."""
    kind = torch.randint(0, 6, (n,), generator=g)
    idx = torch.randint(0, len(x), (n,), generator=g)
    base = x[idx]
    out = torch.empty(n, IMAGE_DIM)
    u = torch.rand(n, IMAGE_DIM, generator=g) * 2 - 1
    gauss = torch.randn(n, IMAGE_DIM, generator=g) * (0.3 + 1.5 * torch.rand(n, 1, generator=g))
    shuffled = base.gather(1, torch.rand(n, IMAGE_DIM, generator=g).argsort(-1))
    const = (torch.rand(n, 1, generator=g) * 2 - 1).expand(n, IMAGE_DIM)
    fade = 0.15 + 0.4 * torch.rand(n, 1, generator=g)
    faded = (base + 1) * fade - 1
    noisy = base + torch.randn(n, IMAGE_DIM, generator=g) * (0.6 + 0.6 * torch.rand(n, 1, generator=g))
    for k, src in enumerate([u, gauss, shuffled, const, faded, noisy]):
        out[kind == k] = src[kind == k]
    return out.clamp(-1, 1)


def train_hidden_scorer() -> HiddenClassifier:
    """Deterministic on the CPU (one thread) from half B and the secret seed; a few seconds."""
    seed = _seed64(_secrets()["hidden_scorer"], "scorer")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    x, y = _real_b()
    clf = HiddenClassifier()
    opt = torch.optim.AdamW(clf.parameters(), lr=2e-3, weight_decay=1e-2)
    for _ in range(1000):
        xb = (x + 0.08 * torch.randn(x.shape, generator=g)).clamp(-1, 1)
        xj = _junk(x, len(x) // 2, g)
        loss = torch.nn.functional.cross_entropy(clf(torch.cat([xb, xj])), torch.cat([y, torch.full((len(xj),), JUNK)]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return clf.eval()


def _scorer() -> HiddenClassifier:
    clf = HiddenClassifier()
    if not SCORER_PATH.exists():
        with torch.random.fork_rng():
            trained = train_hidden_scorer()
        save_file({k: v.detach().contiguous() for k, v in trained.state_dict().items()}, str(SCORER_PATH))
    clf.load_state_dict(load_file(str(SCORER_PATH)))
    return clf.eval().requires_grad_(False)


_CACHE: dict = {}


def _cached(name, fn):
    if name not in _CACHE:
        _CACHE[name] = fn()
    return _CACHE[name]


def diversity_floor(c: int) -> float:
    """DIVERSITY_FRACTION x the mean pairwise distance of the real digits c of half B."""

    def f():
        x, y = _real_b()
        return [DIVERSITY_FRACTION * _mean_pairwise(x[y == d]) for d in range(N_PROMPTS)]

    return _cached("floors", f)[c]


def _mean_pairwise(x: torch.Tensor) -> float:
    n = len(x)
    return float(torch.cdist(x.double(), x.double()).sum() / (n * (n - 1)))


# --------------------------------------------------------------------------- the grader's own sampler


def _schedule() -> dict:
    betas = torch.linspace(0.005, 0.45, N_STEPS, dtype=torch.float64)
    alphas = 1 - betas
    abar = torch.cumprod(alphas, 0)
    prev = torch.cat([torch.ones(1, dtype=torch.float64), abar[:-1]])
    var = betas * (1 - prev) / (1 - abar)
    var[0] = 1e-3
    return {"betas": betas, "alphas": alphas, "abar": abar, "std": var.sqrt()}


@torch.no_grad()
def sample(model: torch.nn.Module, prompts: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Final images [n, 64] of ancestral DDPM sampling for prompts [n] (same chain as the repo's
    model.sample_chain)."""
    sch = _schedule()
    device = next(model.parameters()).device
    n = len(prompts)
    c = prompts.to(device)
    x = torch.randn(n, IMAGE_DIM, generator=generator, dtype=torch.float32).to(device)
    for k in reversed(range(N_STEPS)):
        z = torch.randn(n, IMAGE_DIM, generator=generator, dtype=torch.float32).to(device)
        t = torch.full((n,), k, dtype=torch.long, device=device)
        eps = model(x, t, c)
        b, a, ab = (float(sch[m][k]) for m in ("betas", "alphas", "abar"))
        ab_prev = float(sch["abar"][k - 1]) if k > 0 else 1.0
        x0 = ((x - math.sqrt(1 - ab) * eps) / math.sqrt(ab)).clamp(-1, 1)
        mean = (math.sqrt(ab_prev) * b / (1 - ab)) * x0 + (math.sqrt(a) * (1 - ab_prev) / (1 - ab)) * x
        x = mean + float(sch["std"][k]) * z
    return x.cpu()


def batch_generator(seed: int, i: int) -> torch.Generator:
    """The noise of batch i of a split (the repo's evaluate.py derives its batches the same way)."""
    return torch.Generator().manual_seed(_seed64(seed, f"batch{i}"))


def batch_prompts(i: int, n: int) -> torch.Tensor:
    """The prompts of batch i of a split: all n images of the digit i mod N_PROMPTS."""
    return torch.full((n,), i % N_PROMPTS, dtype=torch.long)


# --------------------------------------------------------------------------- the metric


@torch.no_grad()
def score_images(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Per-sample s(x, c) of images [n, 64] for prompts c [n] (no diversity check): float64 [n];
    non-finite samples score 0."""
    clf = _cached("scorer", _scorer)
    finite = torch.isfinite(x).all(-1)
    xc = torch.where(finite[:, None], x, torch.zeros_like(x)).float().clamp(-1, 1)
    p = torch.softmax(clf(xc).double(), -1)
    threshold = torch.tensor(INK_THRESHOLDS, dtype=torch.float64)[c]
    thin = torch.sigmoid((threshold - ((xc.double() + 1) / 2).mean(-1)) / INK_TEMPERATURE)
    s = p.gather(1, c[:, None])[:, 0] * thin * (1 - p[:, JUNK])
    return torch.where(finite, s, torch.zeros_like(s))


def score_batch(x: torch.Tensor, c: int) -> torch.Tensor:
    """s(x, c) of a batch made for the one prompt c, all zero if the batch is collapsed (mean pairwise
    distance below the prompt's floor)."""
    s = score_images(x, torch.full((len(x),), c, dtype=torch.long))
    finite = torch.isfinite(x).all(-1)
    xf = x[finite].float().clamp(-1, 1)
    if len(xf) < 2 or _mean_pairwise(xf) < diversity_floor(c):
        return torch.zeros_like(s)
    return s


def split(name: str, cfg=None) -> dict:
    """A split is a secret noise seed and a number of samples (the validation seed is public)."""
    seed = VALIDATION_SEED if name == "validation" else int(_secrets()[name])
    return {"name": name, "seed": seed, "n": SPLITS[name]}


def per_sample(model: torch.nn.Module, split: dict) -> np.ndarray:
    model.eval()
    out = []
    for i in range(math.ceil(split["n"] / BATCH)):
        n = min(BATCH, split["n"] - i * BATCH)
        c = batch_prompts(i, n)
        out.append(score_batch(sample(model, c, batch_generator(split["seed"], i)), i % N_PROMPTS).numpy())
    return np.concatenate(out)


def evaluate(model: torch.nn.Module, split: dict, cfg=None) -> float:
    """Mean hidden score of the model's samples (raw metric, higher is better, best 1)."""
    return float(per_sample(model, split).mean())


def evaluate_with_noise(model: torch.nn.Module, split: dict, cfg=None) -> tuple[float, float]:
    """(mean score, standard error of the per-sample shortfall from the best value 1)."""
    s = per_sample(model, split)
    return float(s.mean()), float((1 - s).std(ddof=1) / math.sqrt(len(s)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so eps = 0 and the samples are noise."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model
