"""Prune the dense model to the target sparsity. Editable: this is the pruning algorithm.

    python train.py --out DIR --seed N --scale {ci,smoke,full} --budget-s T --device {cpu,cuda}

Loads the prepared dense model (artifacts/, checksummed), prunes the attention and MLP weight
tensors to config.SPARSITY, and writes DIR/ckpt_{step:08d}.safetensors (the last three are kept;
the grader picks among them). Calibration data, if the algorithm uses any, comes from
data.CalibrationSplit, which meters it (the budget at ci/smoke); the wall clock (--budget-s) is
a safety net at ci/smoke and the binding cap at full.

The shipped algorithm (uniform layer-wise magnitude pruning) uses no calibration data and
ignores the seed: every seed gives the same weights.
"""
import argparse
import time

import torch

from checkpoint import save_checkpoint
from config import SPARSITY
from data import CalibrationSplit
from evaluate import check_pruned
from model import load_dense
from prune import magnitude_prune

# ----------------------------------------------------------------------------- setup
p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--scale", required=True)
p.add_argument("--budget-s", type=float, required=True)
p.add_argument("--device", default="cpu")
args = p.parse_args()

torch.manual_seed(args.seed)
device = torch.device(args.device)
t0 = time.time()
model = load_dense(args.scale).to(device)
calib = CalibrationSplit(args.scale)        # up to calib.budget sequences may be drawn with calib.get(idx)

# ----------------------------------------------------------------------------- prune
magnitude_prune(model, SPARSITY)

problems = check_pruned(model, args.scale)
if problems:
    raise SystemExit("the pruned model would be invalid:\n  " + "\n  ".join(problems))
save_checkpoint(model, args.out, 1, metadata={"calib_sequences": calib.served})
print(f"pruned to sparsity {SPARSITY} with {calib.served} calibration sequences "
      f"in {time.time() - t0:.1f}s", flush=True)
