"""Per-token log-probabilities: log_softmax(logits / T)[target], without the (rows, V) log-softmax.

The core of DPO/NPO/GRPO/PPO and reward-model losses, which need log p(token) for the
sampled tokens only. Forward: one program per row computes the log-sum-exp online and keeps
it (one float per row). Backward: one pass per row rebuilds the softmax from the saved
log-sum-exp and writes g * (onehot(target) - softmax) / T.
"""

import torch

from ._dispatch import row_block, row_warps, tl, triton, use_triton
from .cross_entropy import check_targets

# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


def token_logprobs_reference(logits, target, temperature=1.0, ignore_index=-100):
    """Plain torch: log_softmax over the last dim, gathered at `target`; 0 where ignored; fp32."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    valid = target != ignore_index
    picked = logp.gather(-1, torch.where(valid, target, 0).long().unsqueeze(-1)).squeeze(-1)  # gather wants int64
    return picked * valid


# ---------------------------------------------------------------------------------------------
# Triton kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _logprobs_fwd_kernel(
    logits_ptr, row_stride, target_ptr, out_ptr, lse_ptr, n_cols, inv_temp, ignore_index, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    z_row = logits_ptr + row * row_stride
    y = tl.load(target_ptr + row)
    if y == ignore_index:
        tl.store(out_ptr + row, 0.0)
        tl.store(lse_ptr + row, 0.0)
    else:
        m = tl.full([], float("-inf"), tl.float32)
        d = tl.zeros([], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            a = tl.load(z_row + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32) * inv_temp
            m_new = tl.maximum(m, tl.max(a, axis=0))
            d = d * tl.exp(m - m_new) + tl.sum(tl.exp(a - m_new), axis=0)
            m = m_new
        lse = m + tl.log(d)
        a_y = tl.load(z_row + y).to(tl.float32) * inv_temp
        tl.store(out_ptr + row, a_y - lse)
        tl.store(lse_ptr + row, lse)


@triton.jit
def _logprobs_bwd_kernel(
    logits_ptr,
    row_stride,
    grad_ptr,
    target_ptr,
    lse_ptr,
    grad_out_ptr,
    n_cols,
    inv_temp,
    ignore_index,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    z_row = logits_ptr + row * row_stride
    g_row = grad_ptr + row * n_cols
    y = tl.load(target_ptr + row)
    g_out = tl.load(grad_out_ptr + row).to(tl.float32)
    lse = tl.load(lse_ptr + row)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        a = tl.load(z_row + offs, mask=mask, other=0.0).to(tl.float32) * inv_temp
        p = tl.exp(a - lse)
        g = g_out * (tl.where(offs == y, 1.0, 0.0) - p) * inv_temp  # d(a_y - lse)/dz_j = (1[j=y] - p_j) / T
        g = tl.where(y == ignore_index, 0.0, g)
        tl.store(g_row + offs, g.to(grad_ptr.dtype.element_ty), mask=mask)


class TokenLogprobsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, temperature, ignore_index):
        z = logits.reshape(-1, logits.shape[-1])
        if z.stride(-1) != 1:
            z = z.contiguous()
        y = target.reshape(-1).contiguous()
        n_rows, n_cols = z.shape
        out = torch.empty(n_rows, dtype=torch.float32, device=z.device)
        lse = torch.empty(n_rows, dtype=torch.float32, device=z.device)
        block = row_block(n_cols)
        if n_rows:
            _logprobs_fwd_kernel[(n_rows,)](
                z,
                z.stride(0),
                y,
                out,
                lse,
                n_cols,
                1.0 / temperature,
                ignore_index,
                BLOCK=block,
                num_warps=row_warps(block),
            )
        ctx.save_for_backward(z, y, lse)
        ctx.temperature, ctx.ignore_index, ctx.logits_shape = temperature, ignore_index, logits.shape
        return out.reshape(target.shape)

    @staticmethod
    def backward(ctx, grad_out):
        z, y, lse = ctx.saved_tensors
        n_rows, n_cols = z.shape
        grad = torch.empty((n_rows, n_cols), dtype=z.dtype, device=z.device)
        g = grad_out.reshape(-1).contiguous()
        block = row_block(n_cols)
        if n_rows:
            _logprobs_bwd_kernel[(n_rows,)](
                z,
                z.stride(0),
                grad,
                y,
                lse,
                g,
                n_cols,
                1.0 / ctx.temperature,
                ctx.ignore_index,
                BLOCK=block,
                num_warps=row_warps(block),
            )
        return grad.reshape(ctx.logits_shape), None, None, None


def token_logprobs(logits, target, *, temperature=1.0, ignore_index=-100):
    """log_softmax(logits / temperature)[..., target] for logits (..., V), target (...) ints.

    Returns fp32 of target's shape; positions where target == ignore_index give 0 (and no
    gradient). Differentiable w.r.t. logits; memory is O(rows), not O(rows * V).
    """
    target = check_targets(target, logits.shape[-1], ignore_index)
    if not use_triton(logits, target):
        return token_logprobs_reference(logits, target, temperature, ignore_index)
    return TokenLogprobsFunction.apply(logits, target, temperature, ignore_index)
