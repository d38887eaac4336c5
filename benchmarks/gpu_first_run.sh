#!/usr/bin/env bash
# The prepared run for a lent GPU: one command, under 9 minutes on one H100/H200 with no network (only
# this working tree and the installed Python env), that leaves its figures in files under $OUT.
#
#   bash benchmarks/gpu_first_run.sh            # on the GPU; outputs under $OUT, else outputs/gpu_first_run/<time>
#   SHRUNK=1 bash benchmarks/gpu_first_run.sh   # every step on the CPU at shrunk sizes (AI4AI_SHRINK, the
#                                               # Triton interpreter): what CI runs, so a lend finds nothing to debug
#
# Steps, the figures first; each has its own time limit, and a step whose limit no longer fits in the
# remaining budget (BUDGET_S, default 510 s) is skipped and reported as such:
#   1. step_times: one training step of each LM task's model at `quick` and at `full`
#      (benchmarks/full_step_time.py): milliseconds, model TFLOP/s and the share of the GPU's bf16 peak
#   2. quick_prepare, quick_calibration, quick_grade: one task (QUICK_TASK, default pruning: seconds a
#      seed) at `quick` end to end through the real sandbox: the grader's splits and the repo's
#      prepared model, 5 calibration seeds (anchors, the wall-clock cap), the shipped algorithm graded
#      on the 3 grader seeds; in a throwaway copy of the tree, its records and result kept under $OUT
#   3. kernel_tests: the kernel test suite with tensors on the GPU and the kernels compiled
#      (AI4AI_KERNEL_TEST_DEVICE=cuda); shrunk: one kernel's tests under the interpreter
#   4. gpu_sandbox, gpu_marked_tests: the bubblewrap sandbox with the GPU bound only when asked, and
#      the suite's GPU-marked tests (no GPU in shrunk mode: reported as skipped)
# Ends with summary.txt: one line per step with its exit status and seconds; exits non-zero if any failed.
#
# On a machine with no network whose image has PyTorch, Triton and transformers but not the rest,
# first carry and install what is missing (benchmarks/gpu_offline_setup.sh), e.g. with the device
# tool: carry .device, then
#   bash benchmarks/gpu_offline_setup.sh install && OUT=$OUT bash benchmarks/gpu_first_run.sh
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# images that have only python3: the steps below say python
if ! command -v python >/dev/null; then
  SHIM="$(mktemp -d)"; ln -s "$(command -v python3)" "$SHIM/python"; export PATH="$SHIM:$PATH"
fi
OUT_DIR="${OUT:-$ROOT/outputs/gpu_first_run/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT_DIR"
BUDGET_S="${BUDGET_S:-510}"
QUICK_TASK="${QUICK_TASK:-pruning}"
START=$(date +%s)
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"

# This tree's packages (ai4ai, ai4ai_kernels) first, whatever else is installed.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# private compile caches: a first run must not reuse kernels compiled by anything else
export TRITON_CACHE_DIR="$OUT_DIR/.cache/triton" TORCHINDUCTOR_CACHE_DIR="$OUT_DIR/.cache/inductor"
if [[ "${SHRUNK:-}" == 1 ]]; then
  DEVICE=cpu
  export AI4AI_SHRINK=cpu TRITON_INTERPRET=1
else
  DEVICE=cuda
fi

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
  echo "mode      $([[ $DEVICE == cpu ]] && echo 'shrunk, on the CPU (AI4AI_SHRINK=cpu)' || echo 'GPU')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,utilization.gpu --format=csv,noheader 2>&1 | sed 's/^/gpu       /'
  python -c 'import torch, triton, sys; print("python   ", sys.version.split()[0]); print("torch    ", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); print("triton   ", triton.__version__)'
  command -v bwrap >/dev/null && echo "bwrap     $(bwrap --version)" || echo "bwrap     not installed"
} 2>&1 | tee "$OUT_DIR/environment.txt"

# 1. the step of each LM task's model at both GPU tiers, and its share of the GPU
step step_times 90 python benchmarks/full_step_time.py --device "$DEVICE" --scales quick,full \
  $([[ $DEVICE == cpu ]] && echo "--steps 2 --warmup 1") --out "$OUT_DIR"

# 2. one task at quick end to end: prepare, calibrate, grade the shipped algorithm. In a throwaway
#    copy of the tree, so the prepared models and records it makes never land in this checkout.
COPY="$OUT_DIR/tree"
mkdir -p "$COPY"
tar -C "$ROOT" --exclude=./.git --exclude=./outputs --exclude=./.venv -cf - . | tar -C "$COPY" -xf -
IN_COPY=(env -C "$COPY" PYTHONPATH="$COPY" AI4AI_OUTPUTS="$COPY/outputs")
step quick_prepare 120 "${IN_COPY[@]}" python -m ai4ai.prepare task="$QUICK_TASK" scale=quick device="$DEVICE" progress=false
step quick_calibration 180 "${IN_COPY[@]}" python -m ai4ai.calibrate task="$QUICK_TASK" scale=quick device="$DEVICE" progress=false
step quick_grade 120 "${IN_COPY[@]}" python -m ai4ai.grade task="$QUICK_TASK" scale=quick device="$DEVICE" progress=false \
  hydra.run.dir="$COPY/outputs/quick_grade"
mkdir -p "$OUT_DIR/quick"     # the records and the graded result (of the copy), kept with the logs
cp -r "$COPY/outputs/records" "$OUT_DIR/quick/" 2>/dev/null
find "$COPY/outputs/quick_grade" -name result.json -exec cp {} "$OUT_DIR/quick/result.json" \; 2>/dev/null

# 3. kernel correctness (compiling is most of it on a GPU: 8 workers where pytest-xdist is installed).
#    test_benchmark.py runs benchmarks/kernel_speed.py under the interpreter (CI's job): left out here.
if [[ $DEVICE == cpu ]]; then
  step kernel_tests 150 python -m pytest -q -p no:cacheprovider tests/kernels/test_adamw.py \
    --junitxml="$OUT_DIR/kernel_tests.xml"
else
  XDIST=(); python -c 'import xdist' 2>/dev/null && XDIST=(-n 8)
  step kernel_tests 150 env AI4AI_KERNEL_TEST_DEVICE=cuda python -m pytest -q -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"} tests/kernels \
    --deselect tests/kernels/test_benchmark.py::test_runs_on_cpu_and_writes_the_tables \
    --junitxml="$OUT_DIR/kernel_tests.xml"
fi

# 4. the sandbox sees the GPU when asked, and only then; the suite's GPU-marked tests
if [[ $DEVICE == cpu ]]; then
  echo "== gpu_sandbox: skipped (no GPU in shrunk mode)" | tee -a "$SUMMARY"
  echo "== gpu_marked_tests: skipped (no GPU in shrunk mode)" | tee -a "$SUMMARY"
else
  step gpu_sandbox 75 python benchmarks/gpu_sandbox_check.py --out "$OUT_DIR"
  step gpu_marked_tests 60 python -m pytest -q -p no:cacheprovider -m gpu tests --junitxml="$OUT_DIR/gpu_marked_tests.xml"
fi

rm -rf "$COPY"
echo
echo "summary ($(( $(date +%s) - START )) s; outputs in $OUT_DIR)"
cat "$SUMMARY"
! grep -q -E ": (FAILED|TIMED OUT)" "$SUMMARY"
