import pytest
import torch
import torch.nn.functional as F

from ai4ai_kernels import kl_div, kl_div_reference

DTYPES = [
    pytest.param((torch.float32, 1e-5, 1e-5), id="fp32"),
    pytest.param((torch.bfloat16, 1e-2, 2e-2), id="bf16"),
]
SHAPES = [(1, 1023), (2, 3, 1023), (2, 50257)]


def _run(fn, s, t, go, **kw):
    s = s.detach().clone().requires_grad_(True)
    t = t.detach().clone().requires_grad_(True)
    out = fn(s, t, **kw)
    (out * go).sum().backward()
    return out, s.grad, t.grad


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference(shape, dtype_tol, direction, reduction):
    dtype, atol, rtol = dtype_tol
    s = (torch.randn(shape) * 2).to(dtype)
    t = (torch.randn(shape) * 2).to(dtype)
    temperature = 2.0 if direction == "forward" else 0.8
    kw = dict(direction=direction, temperature=temperature, reduction=reduction)
    go = torch.randn(shape[:-1]) if reduction == "none" else torch.tensor(1.5)
    out, gs, gt = _run(kl_div, s, t, go, **kw)
    out_ref, gs_ref, gt_ref = _run(kl_div_reference, s, t, go, **kw)
    assert "KLDiv" in type(out.grad_fn).__name__
    torch.testing.assert_close(out, out_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(gs, gs_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(gt, gt_ref, atol=atol, rtol=rtol)
    assert (out >= -atol).all()


def test_forward_kl_equals_torch_kl_div_and_student_only_grad():
    s = torch.randn(6, 1023, requires_grad=True)
    t = torch.randn(6, 1023)  # teacher: no grad
    out = kl_div(s, t, temperature=1.5)
    (gs,) = torch.autograd.grad(out, s)
    ref = F.kl_div(
        torch.log_softmax(s / 1.5, -1), torch.log_softmax(t / 1.5, -1), reduction="batchmean", log_target=True
    )
    (gs_ref,) = torch.autograd.grad(ref, s)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gs, gs_ref)


def test_zero_for_identical_and_directions_differ():
    s = torch.randn(3, 1023)
    assert kl_div(s, s).abs().item() < 1e-6
    t = torch.randn(3, 1023) * 3
    fwd, rev = kl_div(s, t), kl_div(s, t, direction="reverse")
    assert fwd > 0 and rev > 0 and not torch.allclose(fwd, rev)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("vocab,block", [(1023, 256), (50257, 4096)])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_multi_block_rows(blocks, vocab, block, dtype_tol, direction):
    dtype, atol, rtol = dtype_tol
    blocks(row=block)
    s = (torch.randn(2, vocab) * 3).to(dtype)
    t = (torch.randn(2, vocab) * 3).to(dtype)
    s[0, -1] = 25.0  # maxima in the last, partial block
    t[1, -1] = 25.0
    go = torch.tensor(0.7)
    out, gs, gt = _run(kl_div, s, t, go, direction=direction)
    out_ref, gs_ref, gt_ref = _run(kl_div_reference, s, t, go, direction=direction)
    torch.testing.assert_close(out, out_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(gs, gs_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(gt, gt_ref, atol=atol, rtol=rtol)
