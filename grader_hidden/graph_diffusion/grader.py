"""Hidden grader of `graph_diffusion`: the diffusion bound on held-out graphs from the source.

The raw metric is the negative ELBO in nats per graph (lower is better), computed by the
pristine repo's `process.elbo` under the process the checkpoint declares (metadata keys
`noise`, `schedule`; see process.py for the accepted family), with the x_t draws fixed by a
secret seed. A declaration outside the family makes the checkpoint invalid (the metric is NaN).

0 anchor: the uniform distribution over graph encodings, N log 4 + P log 3 nats. The model
that realises it is the exact reverse of the uniform-noise process for uniform data (its
p(x_0 | x_t) is the posterior of x_0 under a uniform prior), whose bound equals that closed form.
1.0 anchor: the source's exact negative log-likelihood of the same graphs (Bayes optimum).

Graded on a fresh instance of the source family (generator.drawn): the agent's graphs (the
committed training split and the validation split) come from generator.VISIBLE; a graded training
run is served graphs of the instance drawn from the secret `instance` seed (grading_data, held by
the meter), and the hidden selection and test splits are its graphs too. A split carries its
`instance`, so that the Bayes optimum of its graphs is their own source's.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, write_splits

from . import generator

HERE = Path(__file__).resolve().parent
SPLITS = {"selection": 1_000, "test": 4_000, "validation": 1_000}
TRAIN_GRAPHS = {"smoke": 65_536, "quick": 262_144, "full": 4_194_304}  # ci draws from the smoke split
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_GRAPHS = {**TRAIN_GRAPHS, "quick": 16_384, "full": 16_384}
    SPLITS = {"selection": 128, "test": 256, "validation": 128}  # the hidden splits too: evaluation in seconds


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def _process_module():
    """The pristine repo's process.py (the evaluation worker puts the pristine copy on sys.path)."""
    import process

    return process


@functools.cache
def _graded() -> generator.Source:
    return generator.drawn(int(_secrets()["instance"]))


def _source(instance: str = "visible") -> generator.Source:
    """The visible source (the graphs the agent is given) or the graded instance of its family."""
    return generator.VISIBLE if instance == "visible" else _graded()


def split(name: str, cfg=None) -> dict:
    """{"graphs": [N, N_NODES + N_PAIRS] int64, "noise_seed", "instance"}: the selection and test
    splits are graphs of the graded instance; the validation split (data/val.u8) is the visible one's."""
    s = _secrets()
    instance = "visible" if name == "validation" else "graded"
    return {
        "graphs": torch.from_numpy(generator.sample(SPLITS[name], s[name], _source(instance)).astype(np.int64)),
        "noise_seed": int(s[f"noise_{name}"]) % (1 << 62),
        "instance": instance,
    }


def _bound(model: torch.nn.Module, split: dict, cfg) -> np.ndarray:
    process = _process_module()
    meta = (cfg or {}).get("metadata") or {}
    try:
        proc = process.Process.from_metadata(meta)
    except process.UndeclaredProcess:
        return np.full(len(split["graphs"]), math.nan)
    return process.elbo(model, split["graphs"], proc, split["noise_seed"]).numpy()


def evaluate(model: torch.nn.Module, split: dict, cfg=None) -> float:
    """Mean negative ELBO per graph in nats (NaN: undeclared process; inf: non-finite outputs)."""
    return float(_bound(model, split, cfg).mean())


def evaluate_with_noise(model: torch.nn.Module, split: dict, cfg=None) -> tuple[float, float]:
    b = _bound(model, split, cfg)
    excess = b + generator.log_prob(split["graphs"].numpy(), _source(split["instance"]))
    return float(b.mean()), float(excess.std(ddof=1) / math.sqrt(len(excess)))


class UniformDenoiser(torch.nn.Module):
    """p(x_0 | x_t) for uniform data under the default (uniform, cosine) process: the 0 anchor."""

    def __init__(self, like: torch.nn.Module):
        super().__init__()
        process = _process_module()
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.abar = process.Process().abar.float()
        self.T = process.Process().T
        self.sizes = (len(process.NODE_MARGINAL), len(process.BOND_MARGINAL))

    def forward(self, nodes, bonds, t):
        out = []
        a = self.abar[(t * self.T).round().long()][:, None, None]
        for x, c in zip((nodes, bonds), self.sizes):
            onehot = torch.nn.functional.one_hot(x.long(), c).float()
            out.append(torch.log(a * onehot + (1 - a) / c))  # q(x_t | x_0 = i), uniform prior
        return tuple(out)


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    return UniformDenoiser(model)


def best_attainable(split: dict, cfg=None) -> float:
    """The exact negative log-likelihood of the split's graphs under their own source."""
    return float(-generator.log_prob(split["graphs"].numpy(), _source(split["instance"])).mean())


def materialize(scale: str, dest: Path) -> dict:
    """Write the training split of `scale` and the validation split of the visible source into dest;
    return sha256s."""
    s = _secrets()
    return write_splits(
        dest,
        {
            f"train_{scale}.u8": generator.sample(TRAIN_GRAPHS[scale], s[f"train_{scale}"]),
            "val.u8": generator.sample(SPLITS["validation"], s["validation"]),
        },
    )


def grading_data(scale: str, dest: Path) -> dict:
    """The training split a graded run is served at `scale` (ci reads smoke's): as many graphs as the
    committed one, from the same seed, of the graded instance; return sha256s."""
    name = "smoke" if scale == "ci" else scale
    return write_splits(
        dest, {f"train_{name}.u8": generator.sample(TRAIN_GRAPHS[name], _secrets()[f"train_{name}"], _graded())}
    )
