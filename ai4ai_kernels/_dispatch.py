"""Choosing between a Triton kernel and its torch reference, shared by every op.

Triton runs when the inputs live on CUDA, or when TRITON_INTERPRET=1 (CPU tensors then go
through Triton's interpreter, which is how the tests run). Anywhere else (a CPU without the
flag, or no importable triton) the torch reference runs instead, and one warning per process
says so, so training code that imports these kernels runs on any machine.
"""

import logging
import os
import types

import torch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    HAS_TRITON = False

    def _jit(fn=None, **_kwargs):
        return fn if fn is not None else (lambda f: f)

    # Just enough of the triton namespace for the @triton.jit definitions to be evaluated;
    # the kernels are never launched without triton.
    triton = types.SimpleNamespace(
        jit=_jit, next_power_of_2=lambda n: 1 << max(0, n - 1).bit_length(), cdiv=lambda a, b: -(-a // b)
    )
    tl = types.SimpleNamespace(constexpr=int)

logger = logging.getLogger(__name__)
_warned = False

# @triton.jit decides interpreter-or-GPU when a kernel is defined, i.e. when this package is
# imported; the flag must have been set by then for CPU tensors to go through the kernels.
_DEFINED_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def interpreting() -> bool:
    """Whether kernels run in Triton's CPU interpreter: TRITON_INTERPRET=1 now and at import."""
    return _DEFINED_INTERPRETED and os.environ.get("TRITON_INTERPRET", "0") == "1"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


def interpreter_problem(triton_version: str | None = None, numpy_version: str | None = None) -> str | None:
    """Why Triton's CPU interpreter cannot run these kernels with the installed versions, or None.

    Triton 3.6 and older turn a kernel's int arguments into 1-element arrays and call int() on
    them (a loop `range(0, n_cols, BLOCK)`); NumPy 2.4 made that an error, so every launch fails
    with "only 0-dimensional arrays can be converted to Python scalars". Triton 3.7 squeezes first.
    (Seen: Triton 3.6.0 with NumPy 2.4.6 and 2.5.2; Triton 3.7-3.9 pass.)"""
    if not HAS_TRITON:
        return None
    import numpy

    tv, nv = triton_version or triton.__version__, numpy_version or numpy.__version__
    if _version(tv) < (3, 7) and _version(nv) >= (2, 4):
        return (
            f"Triton {tv}'s CPU interpreter cannot run with NumPy {nv} (NumPy 2.4 refuses the int() of "
            "1-element arrays that Triton up to 3.6 relies on): install triton>=3.7, or numpy<2.4 where "
            "your torch pins this Triton; on a GPU, leave TRITON_INTERPRET unset"
        )
    return None


def use_triton(*tensors: torch.Tensor) -> bool:
    """True if the Triton path should run for these tensors; else warn once and say False. Raises
    where the interpreter is asked for but cannot run (interpreter_problem): falling back then would
    make a kernel test compare the reference with itself."""
    global _warned
    if HAS_TRITON and interpreting() and (problem := interpreter_problem()):
        raise RuntimeError(f"ai4ai_kernels: {problem}")
    if HAS_TRITON and (interpreting() or all(t.is_cuda for t in tensors)):
        return True
    if not _warned:
        _warned = True
        why = (
            "triton is not importable"
            if not HAS_TRITON
            else "inputs are not on CUDA and TRITON_INTERPRET was not 1 when ai4ai_kernels was imported"
        )
        logger.warning("ai4ai_kernels: %s; using the plain torch reference implementations", why)
    return False


# Tests set small blocks here ("row", "flat", "matmul" -> (BM, BN, BK)) so that the loops and
# masks a GPU runs over many blocks are exercised by the interpreter too.
BLOCK_OVERRIDES: dict = {}


def row_block(n_cols: int) -> int:
    """Block width for kernels that stream one row (a vocabulary) block by block.

    The interpreter pays per block, so there a row is one block (up to 64k); a GPU wants
    blocks that fit registers, 4k fp32 values per program here.
    """
    cap = BLOCK_OVERRIDES.get("row", 65536 if interpreting() else 4096)
    return min(cap, triton.next_power_of_2(n_cols))


def row_warps(block: int) -> int:
    """Warps per program for a row kernel of this block width."""
    return 16 if block >= 4096 else (8 if block >= 1024 else 4)


def flat_block() -> int:
    """Block size for elementwise kernels over a flat buffer (optimizer steps)."""
    return BLOCK_OVERRIDES.get("flat", 65536 if interpreting() else 1024)


def matmul_blocks() -> tuple:
    """(BM, BN, BK) tile sizes for the Newton-Schulz matmul."""
    return BLOCK_OVERRIDES.get("matmul", (128, 128, 128) if interpreting() else (64, 64, 32))
