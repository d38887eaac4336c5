import pytest
import torch
import torch.nn.functional as F

from ai4ai_kernels import fused_linear_cross_entropy, fused_linear_cross_entropy_reference

DTYPES = [
    pytest.param((torch.float32, 1e-5, 1e-4), id="fp32"),
    # bf16 logits and gradients; W's gradient is summed over chunks in bf16 (vs one matmul)
    pytest.param((torch.bfloat16, 2e-2, 3e-2), id="bf16"),
]
SHAPES = [  # (rows, hidden, vocab, chunk_rows)
    (1, 32, 1023, None),
    (9, 64, 1023, 4),  # 3 chunks, the last one partial
    (2, 16, 50257, 1),
]
CONFIGS = [  # (reduction, label_smoothing, z_loss_weight, bias)
    ("mean", 0.0, 0.0, False),
    ("sum", 0.1, 1e-4, True),
    ("mean", 0.1, 1e-3, True),
]


def _grads(fn, x, w, b, target, **kw):
    leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, w, b)]
    loss = fn(leaves[0], leaves[1], target, leaves[2], **kw)
    loss.backward()
    return loss, [t.grad if t is not None else None for t in leaves]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-ls{c[1]}-z{c[2]}-bias{c[3]}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}-chunk{s[3]}")
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference(shape, dtype_tol, config):
    dtype, atol, rtol = dtype_tol
    n, h, v, chunk = shape
    reduction, smoothing, z, has_bias = config
    x = torch.randn(n, h).to(dtype)
    w = (torch.randn(v, h) / h**0.5).to(dtype)
    b = torch.randn(v).to(dtype) if has_bias else None
    target = torch.randint(0, v, (n,))
    if n > 1:
        target[1] = -100
    kw = dict(reduction=reduction, label_smoothing=smoothing, z_loss_weight=z)
    loss, grads = _grads(fused_linear_cross_entropy, x, w, b, target, chunk_rows=chunk, **kw)
    loss_ref, grads_ref = _grads(fused_linear_cross_entropy_reference, x, w, b, target, **kw)
    assert "FusedLinearCrossEntropy" in type(loss.grad_fn).__name__
    torch.testing.assert_close(loss, loss_ref, atol=atol, rtol=rtol)
    for name, g, g_ref in zip("xwb", grads, grads_ref):
        if g_ref is None:
            assert g is None
            continue
        assert g.dtype == dtype, name
        # compare relative to the gradient's scale: bf16 sums round at that scale
        scale = g_ref.float().abs().max().item()
        torch.testing.assert_close(g.float() / scale, g_ref.float() / scale, atol=atol, rtol=rtol, msg=name)


def test_frozen_head_and_3d_input():
    x = torch.randn(2, 3, 48, requires_grad=True)
    w = torch.randn(1023, 48) / 7  # frozen: no gradient asked
    target = torch.randint(0, 1023, (2, 3))
    loss = fused_linear_cross_entropy(x, w, target, chunk_rows=2)
    (gx,) = torch.autograd.grad(loss, x)
    x2 = x.detach().clone().requires_grad_(True)
    ref = F.cross_entropy(F.linear(x2, w).reshape(-1, 1023), target.reshape(-1))
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(gx, x2.grad)
    assert gx.shape == x.shape


def test_backward_scales_by_grad_output():
    x = torch.randn(5, 32, requires_grad=True)
    w = torch.randn(1023, 32, requires_grad=True)
    target = torch.randint(0, 1023, (5,))
    (3.0 * fused_linear_cross_entropy(x, w, target)).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    (3.0 * fused_linear_cross_entropy_reference(x, w, target)).backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, w.grad)


def test_rejects_none_reduction():
    with pytest.raises(ValueError):
        fused_linear_cross_entropy(
            torch.randn(2, 4), torch.randn(8, 4), torch.zeros(2, dtype=torch.long), reduction="none"
        )
