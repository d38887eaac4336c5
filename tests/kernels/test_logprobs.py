import pytest
import torch

from ai4ai_kernels import token_logprobs, token_logprobs_reference

DTYPES = [
    pytest.param((torch.float32, 1e-5, 1e-5), id="fp32"),
    pytest.param((torch.bfloat16, 1e-2, 2e-2), id="bf16"),
]
SHAPES = [(1, 1023), (2, 3, 1023), (2, 50257)]


def _run(fn, logits, target, go, **kw):
    x = logits.detach().clone().requires_grad_(True)
    out = fn(x, target, **kw)
    (out * go).sum().backward()
    return out, x.grad


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference(shape, dtype_tol, temperature):
    dtype, atol, rtol = dtype_tol
    logits = (torch.randn(shape) * 2).to(dtype)
    target = torch.randint(0, shape[-1], shape[:-1])
    if target.numel() > 1:
        target.view(-1)[0] = -100
    go = torch.randn(shape[:-1])
    out, grad = _run(token_logprobs, logits, target, go, temperature=temperature)
    out_ref, grad_ref = _run(token_logprobs_reference, logits, target, go, temperature=temperature)
    assert "TokenLogprobs" in type(out.grad_fn).__name__
    assert out.shape == target.shape and out.dtype == torch.float32 and grad.dtype == dtype
    torch.testing.assert_close(out, out_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(grad, grad_ref, atol=atol, rtol=rtol)
    ignored = target == -100
    assert (out[ignored] == 0).all() and (grad[ignored] == 0).all()


def test_equals_log_softmax_gather():
    logits = torch.randn(4, 1023)
    target = torch.randint(0, 1023, (4,))
    expected = torch.log_softmax(logits, -1)[torch.arange(4), target]
    torch.testing.assert_close(token_logprobs(logits, target), expected)
    assert (token_logprobs(logits, target) <= 0).all()


def test_sequence_logprob_gradient_matches_autograd():
    # the DPO pattern: sum of token log-probs over a sequence, differentiated
    logits = torch.randn(2, 5, 1023, requires_grad=True)
    target = torch.randint(0, 1023, (2, 5))
    token_logprobs(logits, target).sum(-1).mean().backward()
    g = logits.grad.clone()
    logits.grad = None
    torch.log_softmax(logits, -1).gather(-1, target[..., None]).sum((-1, -2)).mean().backward()
    torch.testing.assert_close(g, logits.grad)


@pytest.mark.parametrize("vocab,block", [(1023, 256), (50257, 4096)])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_multi_block_rows(blocks, vocab, block, dtype_tol):
    dtype, atol, rtol = dtype_tol
    blocks(row=block)
    logits = (torch.randn(3, vocab) * 4).to(dtype)
    logits[0, -1] = 30.0
    target = torch.tensor([vocab - 1, 5, -100])
    go = torch.randn(3)
    out, grad = _run(token_logprobs, logits, target, go, temperature=0.9)
    out_ref, grad_ref = _run(token_logprobs_reference, logits, target, go, temperature=0.9)
    torch.testing.assert_close(out, out_ref, atol=atol, rtol=rtol)
    torch.testing.assert_close(grad, grad_ref, atol=atol, rtol=rtol)
