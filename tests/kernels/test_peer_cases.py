"""Cases a peer library's tests exercise (Liger-Kernel's CE, fused linear CE and KL tests):
autocast, out-of-range and int32 targets, torch's batchmean. Each op is checked on both
paths: the Triton kernel (under the interpreter here) and the torch fallback that runs on a
CPU without TRITON_INTERPRET. The fallback is reached by patching the dispatch decision.
"""

import sys

import pytest
import torch
import torch.nn.functional as F

import ai4ai_kernels as K
from ai4ai_kernels import _dispatch


@pytest.fixture(params=["kernel", "fallback"])
def path(request, monkeypatch):
    """Run the public functions through the Triton kernel or through the torch fallback."""
    if request.param == "fallback":
        for mod in ("cross_entropy", "fused_linear_cross_entropy", "logprobs", "kl_div"):
            # by module object: the package's attribute of the same name is the function
            monkeypatch.setattr(sys.modules[f"ai4ai_kernels.{mod}"], "use_triton", lambda *tensors: False)
    else:
        assert _dispatch.use_triton(torch.zeros(1))
    return request.param


def _flce_grads(x, w, b, target, **kw):
    leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, w, b)]
    loss = K.fused_linear_cross_entropy(leaves[0], leaves[1], target, leaves[2], **kw)
    loss.backward()
    return loss, [t.grad if t is not None else None for t in leaves]


# ---------------------------------------------------------------------------------------------
# autocast: fp32 master weights, bf16 / fp16 matmuls (how a GPU user trains)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cast_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("chunk", [None, 64], ids=["chunkdefault", "chunk64"])
def test_fused_linear_ce_under_autocast_matches_fallback(cast_dtype, bias, chunk):
    n, h, v = 188, 31, 123  # odd sizes; chunk 64 leaves a partial last chunk
    x = torch.randn(n, h)
    w = torch.rand(v, h) / h**0.5
    b = torch.rand(v) if bias else None
    target = torch.randint(0, v, (n,))
    target[::7] = -100
    with torch.autocast(x.device.type, dtype=cast_dtype):  # CPU autocast here, CUDA autocast on a GPU run
        loss, grads = _flce_grads(x, w, b, target, chunk_rows=chunk)
        assert "FusedLinearCrossEntropy" in type(loss.grad_fn).__name__
        # what the fallback (and an eager LM head + CE) computes under the same autocast
        leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, w, b)]
        ref = K.fused_linear_cross_entropy_reference(leaves[0], leaves[1], target, leaves[2])
    ref.backward()
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, atol=5e-3, rtol=5e-3)
    for name, g, leaf in zip("xwb", grads, leaves):
        if leaf is None:
            continue
        assert g.dtype == torch.float32, name  # gradients come back in the parameters' dtype
        scale = leaf.grad.abs().max().item()
        torch.testing.assert_close(g / scale, leaf.grad / scale, atol=1e-2, rtol=2e-2, msg=name)


def test_fused_linear_ce_autocast_off_inside_is_plain_fp32():
    # autocast disabled explicitly: the fp32 path, exact to fp32 tolerance
    x, w = torch.randn(9, 16), torch.randn(1023, 16) / 4
    target = torch.randint(0, 1023, (9,))
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=False):
        loss, _ = _flce_grads(x, w, None, target)
    torch.testing.assert_close(loss, F.cross_entropy(x @ w.t(), target))


# ---------------------------------------------------------------------------------------------
# targets: out of range raises naming the value; int32 gives the same answer on both paths
# ---------------------------------------------------------------------------------------------


def _ops(v):
    """(name, call(target)) for every op that takes class targets, on fixed inputs of vocab v."""
    logits = torch.randn(6, v)
    x, w = torch.randn(6, 16), torch.randn(v, 16) / 4
    return [
        ("cross_entropy", lambda y: K.cross_entropy(logits, y)),
        ("cross_entropy_none", lambda y: K.cross_entropy(logits, y, reduction="none")),
        ("fused_linear_cross_entropy", lambda y: K.fused_linear_cross_entropy(x, w, y)),
        ("token_logprobs", lambda y: K.token_logprobs(logits, y)),
    ]


@pytest.mark.parametrize("bad", [1023, 5000, -1, -101])
def test_out_of_range_target_raises_naming_it(path, bad):
    target = torch.tensor([3, -100, bad, 0, 1022, 7])
    for _name, call in _ops(1023):
        with pytest.raises(IndexError, match=rf"target {bad} is out of bounds"):
            call(target)
    if target.device.type == "cpu":  # torch agrees that this is an error (on CUDA: a device assert, fatal)
        with pytest.raises(IndexError):
            F.cross_entropy(torch.randn(6, 1023), target)


def test_ignore_index_inside_the_vocabulary_is_not_out_of_range(path):
    target = torch.tensor([3, 0, 0, 5])
    logits = torch.randn(4, 1023)
    loss = K.cross_entropy(logits, target, ignore_index=0)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, ignore_index=0))


def test_non_integer_target_is_refused(path):
    with pytest.raises(TypeError, match="integer"):
        K.cross_entropy(torch.randn(2, 8), torch.zeros(2))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8], ids=str)
def test_integer_target_dtypes_give_one_answer(path, dtype):
    v = 200  # < 256 so uint8 can hold every class
    target = torch.randint(0, v, (6,))
    for name, call in _ops(v):
        torch.testing.assert_close(call(target.to(dtype)), call(target), msg=lambda m: f"{name}: {m}")


def test_int32_target_same_answer_on_kernel_and_fallback(monkeypatch):
    logits = torch.randn(5, 1023, requires_grad=True)
    target = torch.tensor([3, -100, 1022, 0, 17], dtype=torch.int32)
    kernel = K.cross_entropy(logits, target, label_smoothing=0.1)
    (g_kernel,) = torch.autograd.grad(kernel, logits)
    monkeypatch.setattr(sys.modules["ai4ai_kernels.cross_entropy"], "use_triton", lambda *t: False)
    fallback = K.cross_entropy(logits, target, label_smoothing=0.1)
    (g_fallback,) = torch.autograd.grad(fallback, logits)
    torch.testing.assert_close(kernel, fallback)
    torch.testing.assert_close(g_kernel, g_fallback)


# ---------------------------------------------------------------------------------------------
# kl_div(reduction="batchmean") is torch's batchmean: the sum over everything / input.size(0)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("shape", [(6, 1023), (2, 3, 1023), (3, 2, 2, 257)], ids=str)
def test_kl_batchmean_matches_torch(path, shape, direction):
    s = (torch.randn(shape) * 2).requires_grad_(True)
    t = torch.randn(shape) * 2
    out = K.kl_div(s, t, direction=direction, temperature=1.3)
    (gs,) = torch.autograd.grad(out, s)
    s2 = s.detach().clone().requires_grad_(True)
    log_p, log_q = torch.log_softmax(s2 / 1.3, -1), torch.log_softmax(t / 1.3, -1)
    if direction == "forward":  # KL(q || p): torch's kl_div(input=log p, target=log q)
        ref = F.kl_div(log_p, log_q, reduction="batchmean", log_target=True)
    else:  # KL(p || q)
        ref = F.kl_div(log_q, log_p, reduction="batchmean", log_target=True)
    (gs_ref,) = torch.autograd.grad(ref, s2)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gs, gs_ref)
