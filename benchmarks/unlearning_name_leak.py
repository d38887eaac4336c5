"""How much does unlearning's prepared model give away about a held-out fact whose name it is not shown?

    python benchmarks/unlearning_name_leak.py [--facts 2000] [--probes 200]

A held-out retain fact is `[newline, n1..n5, entity, value]` with a secret name among 64^5. An
agent that could recover those names could ask the prepared model every held-out question and
keep its answers, which the secret names are there to prevent. This prints, for prompts with k of
the 5 name symbols right (the others random):

- how often the prepared model's greedy answer is the fact's value, its mean probability, and the
  mean probability of UNKNOWN;
- a coordinate search's signal: for one name position, the 64 symbols ranked over 8 random
  completions of the other four, by the mean P(UNKNOWN) and by how peaked the mean distribution
  over values is; where the right symbol lands.

If the right symbol did not rank near the top, names cannot be found one symbol at a time (64 x 5
questions a fact instead of 64^5). Reads the hidden facts: run it from the project, never in a sandbox.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
REPO = ROOT / "repos_frozen" / "unlearning"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(REPO))

from model import build_model, value_logits  # noqa: E402  (the repo's own)
from safetensors.torch import load_file  # noqa: E402

from grader_hidden.unlearning import grader as G  # noqa: E402
from grader_hidden.unlearning import source as S  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--facts", type=int, default=2000)
    ap.add_argument("--probes", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = build_model("ci")
    model.load_state_dict(load_file(str(REPO / "artifacts" / "memorised_small.safetensors")), strict=False)
    model.eval()
    facts = G._facts()["retain_test"][: args.facts].astype(np.int64)
    rng = np.random.default_rng(0)
    print("name symbols right | answer = value | P(value) | P(UNKNOWN)")
    with torch.no_grad():
        for k in range(S.NAME_LEN + 1):
            x = facts.copy()
            for row in x:
                wrong = rng.choice(S.NAME_LEN, S.NAME_LEN - k, replace=False)
                row[1 + wrong] = S.NAME0 + rng.integers(0, S.N_NAME_SYMBOLS, len(wrong))
            logits = value_logits(model, torch.from_numpy(x)).double()
            p = torch.softmax(logits, -1)
            value = torch.from_numpy(x[:, S.VALUE_POS])
            print(
                f"{k} of {S.NAME_LEN}              | {(logits.argmax(-1) == value).double().mean().item():.3f}"
                f"           | {p[torch.arange(len(x)), value].mean().item():.4f}   | {p[:, S.UNKNOWN].mean().item():.3f}"
            )
        ranks, peaks = [], []
        for fact in facts[: args.probes]:
            cands = np.repeat(fact[None], S.N_NAME_SYMBOLS * 8, 0)
            for r in range(8):
                block = slice(r * S.N_NAME_SYMBOLS, (r + 1) * S.N_NAME_SYMBOLS)
                cands[block, 1 : 1 + S.NAME_LEN] = S.NAME0 + rng.integers(0, S.N_NAME_SYMBOLS, S.NAME_LEN)
                cands[block, 1] = S.NAME0 + np.arange(S.N_NAME_SYMBOLS)
            p = torch.softmax(value_logits(model, torch.from_numpy(cands)).double(), -1)
            right = fact[1] - S.NAME0
            score = p[:, S.UNKNOWN].reshape(8, S.N_NAME_SYMBOLS).mean(0)  # low: more fact-like
            ranks.append(int((score < score[right]).sum()))
            values = p[:, S.VALUE0 : S.VALUE0 + S.N_VALUES].reshape(8, S.N_NAME_SYMBOLS, -1).mean(0)
            peak = values.max(-1).values  # high: one value stands out
            peaks.append(int((peak > peak[right]).sum()))
    n = S.N_NAME_SYMBOLS
    for what, r in (("lowest P(UNKNOWN)", np.array(ranks)), ("most peaked value distribution", np.array(peaks))):
        print(
            f"coordinate search on the first name symbol by {what}, {len(r)} facts: right symbol first "
            f"{(r == 0).mean():.3f} (chance {1 / n:.3f}), in the top 5 {(r < 5).mean():.3f} (chance "
            f"{5 / n:.3f}), mean rank {r.mean():.1f} of {n} (chance {(n - 1) / 2:.1f})"
        )


if __name__ == "__main__":
    main()
