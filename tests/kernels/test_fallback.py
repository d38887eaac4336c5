"""Without CUDA and without TRITON_INTERPRET the public functions run their torch references,
and say so once per process. Runs in subprocesses: the flag is read at import."""

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import logging, sys, torch
if sys.argv[1] == "no-triton":
    sys.modules["triton"] = None  # makes `import triton` raise ImportError
import ai4ai_kernels as K
from ai4ai_kernels import _dispatch
torch.manual_seed(0)
x = torch.randn(4, 1023, requires_grad=True)
y = torch.randint(0, 1023, (4,))
loss = K.cross_entropy(x, y, label_smoothing=0.1)
assert torch.equal(loss, K.cross_entropy_reference(x, y, label_smoothing=0.1))
loss.backward()
assert x.grad is not None and loss.grad_fn is not None and "CrossEntropyFunction" not in type(loss.grad_fn).__name__
assert torch.equal(K.token_logprobs(x, y), K.token_logprobs_reference(x, y))
assert torch.equal(K.kl_div(x, x.detach() * 2), K.kl_div_reference(x, x.detach() * 2))
w = torch.randn(1023, 8)
h = torch.randn(4, 8)
assert torch.equal(K.fused_linear_cross_entropy(h, w, y), K.fused_linear_cross_entropy_reference(h, w, y))
G = torch.randn(16, 24)
assert torch.equal(K.newton_schulz(G), K.newton_schulz_reference(G))
p = torch.nn.Parameter(torch.ones(10)); p.grad = torch.ones(10)
K.FusedAdamW([p], lr=0.1).step()
assert (p < 1).all()
print("HAS_TRITON", _dispatch.HAS_TRITON)
"""


def _run(mode):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=120)


def test_cpu_without_interpreter_uses_reference_and_warns_once():
    proc = _run("cpu")
    assert proc.returncode == 0, proc.stderr
    assert "HAS_TRITON True" in proc.stdout
    assert proc.stderr.count("using the plain torch reference") == 1, proc.stderr
    assert "TRITON_INTERPRET" in proc.stderr


def test_without_triton_package_imports_and_falls_back():
    proc = _run("no-triton")
    assert proc.returncode == 0, proc.stderr
    assert "HAS_TRITON False" in proc.stdout
    assert proc.stderr.count("using the plain torch reference") == 1, proc.stderr
    assert "triton is not importable" in proc.stderr


@pytest.mark.skipif(
    os.environ.get("AI4AI_KERNEL_TEST_DEVICE", "cpu") != "cpu", reason="on a GPU the kernels are compiled"
)
def test_interpreter_flag_selects_triton():
    import torch

    from ai4ai_kernels import _dispatch

    assert _dispatch.interpreting() and _dispatch.use_triton(torch.zeros(1))


@pytest.mark.parametrize(
    "triton_v, numpy_v, broken",
    [
        ("3.6.0", "2.4.6", True),
        ("3.6.0", "2.5.2", True),
        ("3.6.0", "2.3.5", False),
        ("3.7.0", "2.4.6", False),
        ("3.9.0+git1234", "2.5.2", False),
    ],
)
def test_the_interpreters_numpy_incompatibility_is_named(triton_v, numpy_v, broken):
    """Triton <= 3.6's interpreter calls int() on 1-element arrays, which NumPy 2.4 refuses (seen with the
    real Triton 3.6.0 and NumPy 2.4.6 here and 2.5.2 on the H200 image: 163 of the kernel tests failed
    with "only 0-dimensional arrays can be converted to Python scalars")."""
    from ai4ai_kernels import _dispatch

    problem = _dispatch.interpreter_problem(triton_v, numpy_v)
    assert (problem is not None) == broken
    if broken:
        assert f"Triton {triton_v}" in problem and f"NumPy {numpy_v}" in problem and "triton>=3.7" in problem


@pytest.mark.skipif(
    os.environ.get("AI4AI_KERNEL_TEST_DEVICE", "cpu") != "cpu", reason="on a GPU the kernels are compiled"
)
def test_a_kernel_asked_to_interpret_on_a_broken_pair_says_what_to_install(monkeypatch):
    """Not a silent fallback: a kernel test would then compare the reference with itself."""
    import numpy
    import torch

    import ai4ai_kernels as K
    from ai4ai_kernels import _dispatch

    monkeypatch.setattr(_dispatch.triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.6")
    with pytest.raises(RuntimeError, match=r"install triton>=3.7"):
        K.cross_entropy(torch.randn(2, 8), torch.tensor([1, 2]))
