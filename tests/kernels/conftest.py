"""Kernel tests run every Triton kernel on the CPU through Triton's interpreter, or on a GPU
with AI4AI_KERNEL_TEST_DEVICE=cuda (then tensors are created on CUDA by default and the
kernels are compiled, not interpreted: benchmarks/gpu_first_run.sh runs them so).

TRITON_INTERPRET must be set before triton (or ai4ai_kernels) is imported: @triton.jit reads
it when a kernel is defined. Tolerances are (dtype, atol, rtol) per test parameter.
"""

import os
import sys

DEVICE = os.environ.get("AI4AI_KERNEL_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
else:
    os.environ.pop("TRITON_INTERPRET", None)
# If something collected earlier imported the package without the flag, import it afresh.
for _name in [m for m in sys.modules if m == "ai4ai_kernels" or m.startswith("ai4ai_kernels.")]:
    del sys.modules[_name]

import pytest  # noqa: E402
import torch  # noqa: E402

if DEVICE != "cpu":
    torch.set_default_device(DEVICE)

# Elementwise bf16 works in the interpreter (loads, math, stores), but fp32 -> bf16 casts
# truncate there (round-to-nearest on a GPU) and bf16 tl.dot returns garbage, so the
# Newton-Schulz matmul upcasts its tiles when interpreting. Each test file lists
# its (dtype, atol, rtol) cases itself (no imports from conftest: names would clash).


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def blocks(monkeypatch):
    """Set block sizes for one test: blocks(row=256) makes kernels loop over several blocks."""
    from ai4ai_kernels import _dispatch

    def set_blocks(**sizes):
        for key, value in sizes.items():
            monkeypatch.setitem(_dispatch.BLOCK_OVERRIDES, key, value)

    return set_blocks
