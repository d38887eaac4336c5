"""Proxy evaluation: the diffusion bound of each checkpoint on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

Prints the negative ELBO in nats per graph (lower is better) under the process each checkpoint
declares in its ckpt_*.json. The benchmark's score uses the same bound on hidden graphs.
"""
import argparse
import json
from pathlib import Path

from safetensors.torch import load_file

from data import load_graphs
from model import build_model
from process import Process, elbo, uniform_nll

VALIDATION_NOISE_SEED = 0


def load_checkpoint(path: Path, scale: str):
    model = build_model(scale)
    model.load_state_dict(load_file(str(path)), strict=True)
    meta = path.with_suffix(".json")
    declared = json.loads(meta.read_text()) if meta.exists() else {}
    return model.eval(), Process.from_metadata({k: declared[k] for k in ("noise", "schedule") if k in declared})


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    val = load_graphs("val")
    print(f"uniform over encodings: {uniform_nll():.3f} nats per graph")
    for ckpt in ckpts:
        model, proc = load_checkpoint(ckpt, args.scale)
        b = elbo(model, val, proc, VALIDATION_NOISE_SEED)
        print(f"{ckpt.name}  ({proc.noise}, {proc.schedule})  validation bound {b.mean().item():.3f} nats per graph")
