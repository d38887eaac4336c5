"""KL divergence between the softmaxes of two logit tensors, row by row (distillation).

With a = student / T, b = teacher / T, p = softmax(a), q = softmax(b):
    forward KL  KL(q || p) = sum_j q_j (log q_j - log p_j)   (teacher-weighted, the usual KD loss)
    reverse KL  KL(p || q) = sum_j p_j (log p_j - log q_j)   (student-weighted, mode seeking)
Forward kernel: per row, both log-sum-exps online in one pass, then the KL in a second pass;
it keeps three floats per row. Backward kernel: one pass writes the gradients of both inputs.
"""

import torch

from ._dispatch import row_block, row_warps, tl, triton, use_triton

# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


def kl_div_reference(student_logits, teacher_logits, direction="forward", temperature=1.0, reduction="batchmean"):
    """Plain torch KL between softmax(teacher / T) and softmax(student / T), fp32."""
    log_p = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    log_q = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    if direction == "forward":
        per_row = (log_q.exp() * (log_q - log_p)).sum(-1)
    else:
        per_row = (log_p.exp() * (log_p - log_q)).sum(-1)
    if reduction == "none":
        return per_row
    if reduction == "sum":
        return per_row.sum()
    return per_row.sum() / batch_size(student_logits.shape)


def batch_size(shape):
    """What "batchmean" divides by, for logits of this shape: torch's input.size(0), the batch
    of a (B, ..., V) input (not the number of rows B*T); a single row (V,) is a batch of one."""
    return max(1, shape[0]) if len(shape) > 1 else 1


# ---------------------------------------------------------------------------------------------
# Triton kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _kl_fwd_kernel(
    s_ptr,
    s_stride,
    t_ptr,
    t_stride,
    kl_ptr,
    lse_s_ptr,
    lse_t_ptr,
    n_cols,
    inv_temp,
    REVERSE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s_row = s_ptr + row * s_stride
    t_row = t_ptr + row * t_stride
    # pass 1: log-sum-exp of both rows, online
    m_s = tl.full([], float("-inf"), tl.float32)
    m_t = tl.full([], float("-inf"), tl.float32)
    d_s = tl.zeros([], tl.float32)
    d_t = tl.zeros([], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        a = tl.load(s_row + offs, mask=mask, other=float("-inf")).to(tl.float32) * inv_temp
        b = tl.load(t_row + offs, mask=mask, other=float("-inf")).to(tl.float32) * inv_temp
        m_s_new = tl.maximum(m_s, tl.max(a, axis=0))
        m_t_new = tl.maximum(m_t, tl.max(b, axis=0))
        d_s = d_s * tl.exp(m_s - m_s_new) + tl.sum(tl.exp(a - m_s_new), axis=0)
        d_t = d_t * tl.exp(m_t - m_t_new) + tl.sum(tl.exp(b - m_t_new), axis=0)
        m_s = m_s_new
        m_t = m_t_new
    lse_s = m_s + tl.log(d_s)
    lse_t = m_t + tl.log(d_t)
    # pass 2: the divergence
    kl = tl.zeros([], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        log_p = tl.load(s_row + offs, mask=mask, other=0.0).to(tl.float32) * inv_temp - lse_s
        log_q = tl.load(t_row + offs, mask=mask, other=0.0).to(tl.float32) * inv_temp - lse_t
        if REVERSE:
            term = tl.exp(log_p) * (log_p - log_q)
        else:
            term = tl.exp(log_q) * (log_q - log_p)
        kl += tl.sum(tl.where(mask, term, 0.0), axis=0)
    tl.store(kl_ptr + row, kl)
    tl.store(lse_s_ptr + row, lse_s)
    tl.store(lse_t_ptr + row, lse_t)


@triton.jit
def _kl_bwd_kernel(
    s_ptr,
    s_stride,
    t_ptr,
    t_stride,
    ds_ptr,
    dt_ptr,
    kl_ptr,
    lse_s_ptr,
    lse_t_ptr,
    grad_out_ptr,
    grad_out_stride,
    n_cols,
    inv_temp,
    scale,
    REVERSE: tl.constexpr,
    GRAD_S: tl.constexpr,
    GRAD_T: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s_row = s_ptr + row * s_stride
    t_row = t_ptr + row * t_stride
    kl = tl.load(kl_ptr + row)
    lse_s = tl.load(lse_s_ptr + row)
    lse_t = tl.load(lse_t_ptr + row)
    g = tl.load(grad_out_ptr + row * grad_out_stride).to(tl.float32) * scale * inv_temp  # da/ds = db/dt = 1/T
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        log_p = tl.load(s_row + offs, mask=mask, other=0.0).to(tl.float32) * inv_temp - lse_s
        log_q = tl.load(t_row + offs, mask=mask, other=0.0).to(tl.float32) * inv_temp - lse_t
        p = tl.exp(log_p)
        q = tl.exp(log_q)
        if REVERSE:
            d_a = p * (log_p - log_q - kl)  # d/da_j sum_k p_k (log p_k - log q_k) = p_j (r_j - KL)
            d_b = q - p  # d/db_j of -sum_k p_k log q_k = q_j - p_j
        else:
            d_a = p - q  # d/da_j of -sum_k q_k log p_k = p_j - q_j
            d_b = q * (log_q - log_p - kl)  # d/db_j sum_k q_k (log q_k - log p_k) = q_j (r_j - KL)
        if GRAD_S:
            tl.store(ds_ptr + row * n_cols + offs, (g * d_a).to(ds_ptr.dtype.element_ty), mask=mask)
        if GRAD_T:
            tl.store(dt_ptr + row * n_cols + offs, (g * d_b).to(dt_ptr.dtype.element_ty), mask=mask)


def _rows(x):
    x = x.reshape(-1, x.shape[-1])
    return x if x.stride(-1) == 1 else x.contiguous()


class KLDivFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student_logits, teacher_logits, direction, temperature, reduction):
        s, t = _rows(student_logits), _rows(teacher_logits)
        n_rows, n_cols = s.shape
        kl = torch.empty(n_rows, dtype=torch.float32, device=s.device)
        lse_s = torch.empty_like(kl)
        lse_t = torch.empty_like(kl)
        block = row_block(n_cols)
        if n_rows:
            _kl_fwd_kernel[(n_rows,)](
                s,
                s.stride(0),
                t,
                t.stride(0),
                kl,
                lse_s,
                lse_t,
                n_cols,
                1.0 / temperature,
                REVERSE=direction == "reverse",
                BLOCK=block,
                num_warps=row_warps(block),
            )
        ctx.save_for_backward(s, t, kl, lse_s, lse_t)
        ctx.args = (direction, temperature, reduction, student_logits.shape, teacher_logits.shape)
        if reduction == "none":
            return kl.reshape(student_logits.shape[:-1])
        if reduction == "sum":
            return kl.sum()
        return kl.sum() / batch_size(student_logits.shape)

    @staticmethod
    def backward(ctx, grad_out):
        s, t, kl, lse_s, lse_t = ctx.saved_tensors
        direction, temperature, reduction, s_shape, t_shape = ctx.args
        n_rows, n_cols = s.shape
        grad_s_needed, grad_t_needed = ctx.needs_input_grad[:2]
        ds = torch.empty_like(s) if grad_s_needed else None
        dt = torch.empty_like(t) if grad_t_needed else None
        g = grad_out.reshape(-1).contiguous()
        scale = 1.0 / batch_size(s_shape) if reduction == "batchmean" else 1.0  # d(sum / B)/d row = 1 / B
        block = row_block(n_cols)
        if n_rows and (grad_s_needed or grad_t_needed):
            _kl_bwd_kernel[(n_rows,)](
                s,
                s.stride(0),
                t,
                t.stride(0),
                ds if ds is not None else s,
                dt if dt is not None else t,
                kl,
                lse_s,
                lse_t,
                g,
                1 if reduction == "none" else 0,
                n_cols,
                1.0 / temperature,
                scale,
                REVERSE=direction == "reverse",
                GRAD_S=grad_s_needed,
                GRAD_T=grad_t_needed,
                BLOCK=block,
                num_warps=row_warps(block),
            )
        return (
            (None if ds is None else ds.reshape(s_shape)),
            (None if dt is None else dt.reshape(t_shape)),
            None,
            None,
            None,
        )


def kl_div(student_logits, teacher_logits, *, direction="forward", temperature=1.0, reduction="batchmean"):
    """KL divergence between softmax(teacher_logits / T) and softmax(student_logits / T), fp32.

    direction: "forward" = KL(teacher || student) (classic distillation), "reverse" =
    KL(student || teacher). Both inputs (..., V). reduction: "batchmean" (sum over all rows
    / input.size(0), as torch.nn.functional.kl_div: for (B, T, V) that is per sequence, not
    per token), "sum", or "none" (per row, shape (...)). No T^2 factor is applied. Gradients flow
    to whichever input requires grad (usually only the student).
    """
    if direction not in ("forward", "reverse"):
        raise ValueError(f"direction must be forward or reverse, got {direction!r}")
    if reduction not in ("batchmean", "sum", "none"):
        raise ValueError(f"reduction must be batchmean, sum or none, got {reduction!r}")
    if not use_triton(student_logits, teacher_logits):
        return kl_div_reference(student_logits, teacher_logits, direction, temperature, reduction)
    return KLDivFunction.apply(student_logits, teacher_logits, direction, temperature, reduction)
