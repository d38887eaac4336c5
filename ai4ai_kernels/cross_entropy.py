"""Cross-entropy over logits: loss and gradient in one kernel, one program per row.

Each program streams its row of the vocabulary twice: once for the log-sum-exp (online: a
running max and a running sum rescaled when the max grows), once to write d loss / d logits.
The gradient is therefore ready after the forward; backward only scales it by grad_output.
Supports ignore_index, label smoothing, mean/sum/none reduction and a z-loss (w * lse^2).
"""

import torch
import torch.nn.functional as F

from ._dispatch import row_block, row_warps, tl, triton, use_triton

# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


def cross_entropy_reference(
    logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", z_loss_weight=0.0
):
    """Plain-torch cross-entropy with the same contract as `cross_entropy` (loss in fp32)."""
    z = logits.float().reshape(-1, logits.shape[-1])
    y = target.reshape(-1).long()  # F.cross_entropy takes int64 (or uint8) only; the kernel takes any int
    loss = F.cross_entropy(z, y, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing)
    valid = y != ignore_index
    if z_loss_weight:
        loss = loss + z_loss_weight * torch.logsumexp(z, dim=-1).pow(2) * valid
    if reduction == "none":
        return loss.reshape(target.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / valid.sum()


def check_targets(target, n_classes, ignore_index):
    """Refuse what torch refuses: non-integer targets, and targets outside [0, n_classes) that
    are not ignore_index (the kernels' row loads are not bounds-checked, so such a target would
    read a neighbouring row and return a finite, wrong loss). Returns the targets as the
    kernels read them: int32 or int64, as given; other integer types widened to int64."""
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
        raise TypeError(f"target must be an integer tensor of class indices, got {target.dtype}")
    bad = (target != ignore_index) & ((target < 0) | (target >= n_classes))
    if bad.any():  # one host sync per call: the price of an error instead of a silent wrong loss
        value = target[bad].reshape(-1)[0].item()
        raise IndexError(
            f"target {value} is out of bounds: classes are [0, {n_classes}) and ignore_index is {ignore_index}"
        )
    return target if target.dtype in (torch.int32, torch.int64) else target.long()


# ---------------------------------------------------------------------------------------------
# Triton kernel
# ---------------------------------------------------------------------------------------------


@triton.jit
def _cross_entropy_kernel(
    logits_ptr,
    logits_row_stride,
    grad_ptr,  # may be logits_ptr itself: each block is read before it is overwritten
    grad_row_stride,
    target_ptr,
    loss_ptr,  # (n_rows,) fp32 per-row loss, unreduced
    n_valid_ptr,  # () int, rows whose target is not ignore_index (used for MEAN)
    n_cols,
    ignore_index,
    label_smoothing,
    z_loss_weight,
    MEAN: tl.constexpr,
    SMOOTHING: tl.constexpr,
    Z_LOSS: tl.constexpr,
    COMPUTE_GRAD: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    z_row = logits_ptr + row * logits_row_stride
    g_row = grad_ptr + row * grad_row_stride
    y = tl.load(target_ptr + row)

    if y == ignore_index:
        tl.store(loss_ptr + row, 0.0)
        if COMPUTE_GRAD:
            for start in range(0, n_cols, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                tl.store(g_row + offs, tl.zeros([BLOCK], tl.float32).to(grad_ptr.dtype.element_ty), mask=offs < n_cols)
    else:
        # pass 1: online log-sum-exp (and the sum of logits, for smoothing)
        m = tl.full([], float("-inf"), tl.float32)
        d = tl.zeros([], tl.float32)
        sum_z = tl.zeros([], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            z = tl.load(z_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(z, axis=0))
            d = d * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), axis=0)
            m = m_new
            if SMOOTHING:
                sum_z += tl.sum(tl.where(mask, z, 0.0), axis=0)
        lse = m + tl.log(d)

        # loss = lse - sum_j q_j z_j, with q = (1 - eps) onehot(y) + eps / V
        z_y = tl.load(z_row + y).to(tl.float32)
        eps_v = label_smoothing / n_cols
        loss = lse - z_y
        if SMOOTHING:
            loss = lse - (1.0 - label_smoothing) * z_y - eps_v * sum_z
        if Z_LOSS:
            loss += z_loss_weight * lse * lse
        tl.store(loss_ptr + row, loss)

        # pass 2: gradient of this row's (reduced) loss
        if COMPUTE_GRAD:
            scale = 1.0
            if MEAN:
                scale = 1.0 / tl.load(n_valid_ptr).to(tl.float32)
            for start in range(0, n_cols, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < n_cols
                z = tl.load(z_row + offs, mask=mask, other=0.0).to(tl.float32)
                p = tl.exp(z - lse)  # softmax_j = d lse / d z_j
                g = p
                if Z_LOSS:
                    g = p * (1.0 + 2.0 * z_loss_weight * lse)  # d(w lse^2)/dz_j = 2 w lse p_j
                if SMOOTHING:
                    g = g - eps_v  # d(-eps/V sum_j z_j)/dz_j = -eps/V
                g = tl.where(offs == y, g - (1.0 - label_smoothing), g)  # d(-(1-eps) z_y)/dz_j
                tl.store(g_row + offs, (g * scale).to(grad_ptr.dtype.element_ty), mask=mask)


def cross_entropy_rows(logits, target, grad, n_valid, ignore_index, label_smoothing, z_loss_weight, mean):
    """Launch the kernel on 2-D `logits` (rows, V); write d loss/d logits into `grad` (or skip
    it when `grad` is None) and return the fp32 per-row losses. `grad` may be `logits`."""
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    if n_rows == 0:
        return losses
    block = row_block(n_cols)
    _cross_entropy_kernel[(n_rows,)](
        logits,
        logits.stride(0),
        grad if grad is not None else logits,
        grad.stride(0) if grad is not None else 0,
        target,
        losses,
        n_valid,
        n_cols,
        ignore_index,
        float(label_smoothing),
        float(z_loss_weight),
        MEAN=mean,
        SMOOTHING=label_smoothing > 0,
        Z_LOSS=z_loss_weight != 0,
        COMPUTE_GRAD=grad is not None,
        BLOCK=block,
        num_warps=row_warps(block),
    )
    return losses


class CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, label_smoothing, reduction, z_loss_weight):
        shape = target.shape
        z = logits.reshape(-1, logits.shape[-1])
        if z.stride(-1) != 1:
            z = z.contiguous()
        y = target.reshape(-1).contiguous()
        n_valid = (y != ignore_index).sum()
        grad = torch.empty_like(z) if ctx.needs_input_grad[0] else None
        mean = reduction == "mean"
        losses = cross_entropy_rows(z, y, grad, n_valid, ignore_index, label_smoothing, z_loss_weight, mean)
        ctx.grad_logits = grad
        ctx.reduction = reduction
        ctx.logits_shape = logits.shape
        if reduction == "none":
            return losses.reshape(shape)
        if reduction == "sum":
            return losses.sum()
        return losses.sum() / n_valid

    @staticmethod
    def backward(ctx, grad_output):
        grad = ctx.grad_logits
        if grad is None:
            raise RuntimeError("cross_entropy: backward ran twice; the fused gradient is consumed by the first one")
        ctx.grad_logits = None
        if ctx.reduction == "none":
            grad.mul_(grad_output.reshape(-1, 1).to(grad.dtype))  # d/dz of sum_i g_i loss_i
        else:
            grad.mul_(grad_output.to(grad.dtype))
        return grad.reshape(ctx.logits_shape), None, None, None, None, None


def cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, reduction="mean", z_loss_weight=0.0):
    """Cross-entropy of `logits` (..., V) against integer `target` (...), loss in fp32.

    Same meaning as F.cross_entropy(logits, target, ignore_index=, label_smoothing=,
    reduction=) plus an optional z-loss `z_loss_weight * logsumexp(logits)**2` per counted
    row. reduction: "mean" (over rows whose target != ignore_index), "sum" or "none".
    The gradient is computed during the forward and held until backward (one backward only).
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}")
    target = check_targets(target, logits.shape[-1], ignore_index)
    if not use_triton(logits, target):
        return cross_entropy_reference(logits, target, ignore_index, label_smoothing, reduction, z_loss_weight)
    return CrossEntropyFunction.apply(logits, target, ignore_index, label_smoothing, reduction, z_loss_weight)
