#!/usr/bin/env bash
# The first run on a GPU machine: what has never executed on a GPU, checked in one pass that fits
# in 10 minutes on one H200 with no network (only this working tree and the installed Python env).
#
#   bash benchmarks/gpu_first_run.sh            # outputs under $OUT, else outputs/gpu_first_run/<time>
#
# Steps, most important first; each has its own time limit, and a step whose limit no longer fits
# in the remaining budget (BUDGET_S, default 570 s) is skipped and reported as such:
#   1. kernel correctness on CUDA: the whole kernel test suite with tensors on the GPU and the
#      kernels compiled (AI4AI_KERNEL_TEST_DEVICE=cuda), not interpreted
#   2. the bubblewrap sandbox with the GPU: device nodes bound only when asked, CUDA memory
#      allocates and a fused-CE training loop runs inside (benchmarks/gpu_sandbox_check.py)
#   3. the test suite's GPU-marked tests (pytest -m gpu: the real training sandbox's /dev and caches)
#   4. one training step of each LM task's real `full` model (benchmarks/full_step_time.py)
#   5. a reduced-budget `full` prepare and calibration of one task end to end (AI4AI_SHRINK=cpu)
#   6. the kernel table at a reduced sweep (benchmarks/kernel_speed.py --quick), in what budget is left
# Ends with summary.txt: one line per step with its exit status and seconds.
#
# On a machine with no network whose image has PyTorch, Triton and transformers but not the rest,
# first carry and install what is missing (benchmarks/gpu_offline_setup.sh), e.g. with the device
# tool: carry .device, then
#   bash benchmarks/gpu_offline_setup.sh install && OUT=/tmp/g bash benchmarks/gpu_first_run.sh;
#   tar czf $OUT/g.tgz -C /tmp/g --exclude=./tree --exclude=./.cache .
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# images that have only python3: the steps below say python
if ! command -v python >/dev/null; then
  SHIM="$(mktemp -d)"; ln -s "$(command -v python3)" "$SHIM/python"; export PATH="$SHIM:$PATH"
fi
OUT_DIR="${OUT:-$ROOT/outputs/gpu_first_run/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT_DIR"
BUDGET_S="${BUDGET_S:-570}"
START=$(date +%s)
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"

# This tree's packages (ai4ai, ai4ai_kernels) first, whatever else is installed.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# private compile caches: a first run must not reuse kernels compiled by anything else
export TRITON_CACHE_DIR="$OUT_DIR/.cache/triton" TORCHINDUCTOR_CACHE_DIR="$OUT_DIR/.cache/inductor"

step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log to NAME.log, record the result
  local name="$1" limit="$2"; shift 2
  local left=$(( BUDGET_S - ($(date +%s) - START) ))
  if (( left < limit )); then
    echo "== $name: skipped ($left s of the budget left, the step needs up to $limit s)" | tee -a "$SUMMARY"
    return 0
  fi
  echo "== $name (limit $limit s)"
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT_DIR/$name.log"
  local verdict=ok
  (( rc == 124 || rc == 137 )) && verdict="TIMED OUT" || { (( rc != 0 )) && verdict=FAILED; }
  echo "== $name: $verdict (rc $rc, $(( $(date +%s) - t0 )) s)" | tee -a "$SUMMARY"
}

{
  echo "date      $(date -Is)"
  echo "commit    $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,utilization.gpu --format=csv,noheader 2>&1 | sed 's/^/gpu       /'
  python -c 'import torch, triton, sys; print("python   ", sys.version.split()[0]); print("torch    ", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); print("triton   ", triton.__version__)'
  command -v bwrap >/dev/null && echo "bwrap     $(bwrap --version)" || echo "bwrap     not installed"
} 2>&1 | tee "$OUT_DIR/environment.txt"

# 1. kernel correctness on CUDA
# (compiling is most of it: spread over 8 workers where pytest-xdist is installed)
XDIST=(); python -c 'import xdist' 2>/dev/null && XDIST=(-n 8)
# test_benchmark.py runs benchmarks/kernel_speed.py on the CPU under the interpreter (CI's job): left out here.
# (On the H200 image, Triton 3.6 with NumPy 2.5, the interpreter cannot run at all: NumPy 2.4 refuses
# the int() of 1-element arrays that Triton up to 3.6 relies on; ai4ai_kernels now says so by name.)
step kernel_tests 200 env AI4AI_KERNEL_TEST_DEVICE=cuda python -m pytest -q -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"} tests/kernels \
  --deselect tests/kernels/test_benchmark.py::test_runs_on_cpu_and_writes_the_tables \
  --junitxml="$OUT_DIR/kernel_tests.xml"

# 2. the sandbox sees the GPU when asked, and only then; a training process allocates in it
step gpu_sandbox 75 python benchmarks/gpu_sandbox_check.py --out "$OUT_DIR"

# 3. the suite's GPU-marked tests (pyproject deselects them by default)
step gpu_marked_tests 60 python -m pytest -q -p no:cacheprovider -m gpu tests --junitxml="$OUT_DIR/gpu_marked_tests.xml"

# 4. one training step of each LM task's real `full` model at its train.py's batch (README's
#    "Full scale" table assumed them dispatch-bound at ~8 ms; this measures it)
step full_step_time 90 python benchmarks/full_step_time.py --device cuda --out "$OUT_DIR"

# 5. a reduced-budget `full` calibration of the optimizer task, end to end on the GPU: prepare
#    (the grader's full split into the cache), then calibrate: train under the wall-clock cap in the
#    sandbox, select, evaluate, store anchors. AI4AI_SHRINK=cpu gives full its shrunk sizes (the same
#    code paths, seconds a seed; see ai4ai/repo/preparing.py). It runs in a throwaway copy of the tree,
#    so the anchors it stores (of a shrunk run) never land in this checkout's grader_hidden/.
COPY="$OUT_DIR/tree"
mkdir -p "$COPY"
tar -C "$ROOT" --exclude=./.git --exclude=./outputs --exclude=./.venv -cf - . | tar -C "$COPY" -xf -
step full_prepare 60 env -C "$COPY" AI4AI_SHRINK=cpu PYTHONPATH="$COPY" \
  python -m ai4ai.prepare task=optimizer scale=full device=cuda progress=false
step full_calibration 240 env -C "$COPY" AI4AI_SHRINK=cpu PYTHONPATH="$COPY" \
  python -m ai4ai.calibrate task=optimizer scale=full device=cuda progress=false
mkdir -p "$OUT_DIR/calibration"     # the shrunk records (the copy's grader_hidden), kept with the logs
cp "$COPY"/grader_hidden/optimizer/calibration/full__* "$COPY"/grader_hidden/optimizer/anchors.yaml \
  "$OUT_DIR/calibration/" 2>/dev/null

# 6. the kernel table, reduced: torch.compile only for the fused linear CE (compiling every
#    shape of every op would take the whole budget)
step kernels_table_flce 140 python benchmarks/kernel_speed.py --quick --ops flce --out "$OUT_DIR/kernels_flce"
step kernels_table_losses 75 python benchmarks/kernel_speed.py --quick --no-compile --ops ce,logprobs,kl,adamw,newton_schulz \
  --out "$OUT_DIR/kernels_losses"


echo
echo "summary ($(( $(date +%s) - START )) s; outputs in $OUT_DIR)"
cat "$SUMMARY"
! grep -q -E ": (FAILED|TIMED OUT)" "$SUMMARY"
