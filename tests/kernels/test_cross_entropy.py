import pytest
import torch
import torch.nn.functional as F

from ai4ai_kernels import cross_entropy, cross_entropy_reference

DTYPES = [
    pytest.param((torch.float32, 1e-5, 1e-5), id="fp32"),
    pytest.param((torch.bfloat16, 1e-2, 2e-2), id="bf16"),  # bf16 logits, fp32 math, bf16 grads
]
SHAPES = [(1, 1023), (7, 1023), (2, 50257), (2, 3, 1023)]  # (..., V); one row; odd vocab; GPT-2 vocab
CONFIGS = [  # (reduction, label_smoothing, z_loss_weight)
    ("mean", 0.0, 0.0),
    ("sum", 0.1, 0.0),
    ("none", 0.0, 1e-3),
    ("mean", 0.2, 1e-4),
]


def _run(fn, logits, target, go=None, **kw):
    x = logits.detach().clone().requires_grad_(True)
    loss = fn(x, target, **kw)
    go = torch.randn_like(loss) if go is None else go
    (loss * go).sum().backward()
    return loss, x.grad, go


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-ls{c[1]}-z{c[2]}")
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference(shape, dtype_tol, config):
    dtype, atol, rtol = dtype_tol
    reduction, smoothing, z = config
    logits = (torch.randn(shape) * 3).to(dtype)
    target = torch.randint(0, shape[-1], shape[:-1])
    target.view(-1)[-1] = -100  # one ignored row (the only row when there is one)
    kw = dict(ignore_index=-100, label_smoothing=smoothing, reduction=reduction, z_loss_weight=z)
    loss, grad, go = _run(cross_entropy, logits, target, **kw)
    loss_ref, grad_ref, _ = _run(cross_entropy_reference, logits, target, go=go, **kw)
    assert loss.dtype == torch.float32 and grad.dtype == dtype and grad.shape == logits.shape
    assert loss.grad_fn is not None and "CrossEntropy" in type(loss.grad_fn).__name__  # the Triton path ran
    if reduction == "mean" and target.numel() == 1:
        assert torch.isnan(loss) and torch.isnan(loss_ref)  # nothing counted: 0/0, like torch
        return
    torch.testing.assert_close(loss, loss_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(grad, grad_ref, atol=atol, rtol=rtol)
    ignored = (target == -100).unsqueeze(-1).expand_as(grad)
    assert (grad[ignored] == 0).all()


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_matches_torch_cross_entropy(smoothing):
    logits = torch.randn(5, 1023, requires_grad=True)
    target = torch.tensor([3, -100, 1022, 0, 17])
    loss = cross_entropy(logits, target, label_smoothing=smoothing)
    (g,) = torch.autograd.grad(loss, logits)
    ref = F.cross_entropy(logits, target, label_smoothing=smoothing)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(g, g_ref)


def test_z_loss_adds_lse_squared():
    logits = torch.randn(4, 1023) + 5.0  # shifted so that lse is far from 0
    target = torch.randint(0, 1023, (4,))
    base = cross_entropy(logits, target, reduction="none")
    with_z = cross_entropy(logits, target, reduction="none", z_loss_weight=0.01)
    torch.testing.assert_close(with_z - base, 0.01 * torch.logsumexp(logits, -1) ** 2)


def test_no_grad_input_and_single_backward():
    logits = torch.randn(3, 1023)
    target = torch.randint(0, 1023, (3,))
    assert cross_entropy(logits, target).grad_fn is None
    x = logits.clone().requires_grad_(True)
    loss = cross_entropy(x, target)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


def test_rejects_unknown_reduction():
    with pytest.raises(ValueError):
        cross_entropy(torch.randn(2, 8), torch.zeros(2, dtype=torch.long), reduction="avg")


# the GPU streams a row in 4096-wide blocks; the interpreter normally takes one block per row
@pytest.mark.parametrize("vocab,block", [(1023, 256), (50257, 4096)])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_multi_block_rows(blocks, vocab, block, dtype_tol):
    dtype, atol, rtol = dtype_tol
    blocks(row=block)
    logits = (torch.randn(3, vocab) * 4).to(dtype)
    logits[1, -1] = 30.0  # the row max sits in the last, partial block: the online rescale must fire
    target = torch.tensor([0, vocab - 1, -100])
    kw = dict(label_smoothing=0.1, z_loss_weight=1e-3, reduction="sum")
    loss, grad, go = _run(cross_entropy, logits, target, **kw)
    # fp64 reference for fp32: with lse ~ 30 the fp32 torch reference is itself off by ~4e-5
    # here, the kernel by ~4e-7
    ref = _reference_fp64 if dtype == torch.float32 else cross_entropy_reference
    loss_ref, grad_ref, _ = _run(ref, logits, target, go=go, **kw)
    torch.testing.assert_close(loss.double(), loss_ref.double(), atol=atol, rtol=rtol)
    torch.testing.assert_close(grad.double(), grad_ref.double(), atol=atol, rtol=rtol)


def _reference_fp64(x, target, label_smoothing, z_loss_weight, reduction):
    z = x.double()
    loss = F.cross_entropy(z, target, reduction="none", label_smoothing=label_smoothing)
    loss = loss + z_loss_weight * torch.logsumexp(z, -1).pow(2) * (target != -100)
    assert reduction == "sum"
    return loss.sum()
