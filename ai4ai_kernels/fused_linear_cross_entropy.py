"""Fused LM head + cross-entropy: loss of softmax(x @ W^T + b) without the full logits tensor.

The rows of x are processed in chunks. For each chunk the logits (chunk, V) are formed by a
matmul, the cross-entropy kernel replaces them in place by d loss / d logits, and the chunk's
contributions to the gradients of x, W and b are taken right away; then the chunk's logits
are dropped. Peak extra memory is one chunk of logits instead of (rows, V) logits plus their
gradient. The gradients are ready after the forward; backward only scales them.
"""

import torch
import torch.nn.functional as F

from ._dispatch import triton, use_triton
from .cross_entropy import check_targets, cross_entropy_reference, cross_entropy_rows

# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


def fused_linear_cross_entropy_reference(
    x, weight, target, bias=None, ignore_index=-100, label_smoothing=0.0, reduction="mean", z_loss_weight=0.0
):
    """Plain torch: materialise the logits, then `cross_entropy_reference` (loss in fp32)."""
    logits = F.linear(x, weight, bias)
    return cross_entropy_reference(logits, target, ignore_index, label_smoothing, reduction, z_loss_weight)


# ---------------------------------------------------------------------------------------------
# host driver (the Triton kernel is the cross-entropy one; the matmuls are cuBLAS)
# ---------------------------------------------------------------------------------------------


def default_chunk_rows(n_rows, hidden, vocab):
    """Rows per chunk so that one chunk of logits is about as large as the hidden states."""
    return max(1, min(n_rows, max(256, triton.next_power_of_2(-(-n_rows * hidden // vocab)))))


class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, x, weight, bias, target, ignore_index, label_smoothing, reduction, z_loss_weight, chunk_rows, compute_dtype
    ):
        # compute_dtype is the autocast dtype when called under torch.autocast, else None. The
        # matmuls then run in it, as autocast would run F.linear, with autocast off in here so
        # that every buffer has the dtype written below; gradients return in the inputs' dtypes.
        x2 = x.reshape(-1, x.shape[-1])
        y = target.reshape(-1).contiguous()
        n_rows, vocab = x2.shape[0], weight.shape[0]
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        compute_grad = need_x or need_w or need_b
        n_valid = (y != ignore_index).sum()
        chunk = chunk_rows or default_chunk_rows(n_rows, x2.shape[1], vocab)
        w_c = weight if compute_dtype is None else weight.to(compute_dtype)
        b_c = bias if bias is None or compute_dtype is None else bias.to(compute_dtype)

        grad_x = torch.empty_like(x2) if need_x else None
        # accumulated over chunks in the weight's dtype (fp32 accumulation inside each matmul);
        # fp32 master weights under autocast therefore accumulate in fp32
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros(vocab, dtype=torch.float32, device=x.device) if need_b else None
        losses = torch.empty(n_rows, dtype=torch.float32, device=x.device)

        with torch.autocast(x.device.type, enabled=False):
            for start in range(0, n_rows, chunk):
                end = min(start + chunk, n_rows)
                x_c = x2[start:end] if compute_dtype is None else x2[start:end].to(compute_dtype)
                logits = x_c @ w_c.t() if b_c is None else torch.addmm(b_c, x_c, w_c.t())  # (chunk, V)
                grad_buf = logits if compute_grad else None  # overwritten in place by dL/dlogits
                losses[start:end] = cross_entropy_rows(
                    logits,
                    y[start:end],
                    grad_buf,
                    n_valid,
                    ignore_index,
                    label_smoothing,
                    z_loss_weight,
                    reduction == "mean",
                )
                if compute_grad:
                    if need_x:
                        if grad_x.dtype == logits.dtype:
                            torch.mm(logits, w_c, out=grad_x[start:end])  # dL/dx = dL/dlogits @ W
                        else:
                            grad_x[start:end] = logits @ w_c  # dL/dx = dL/dlogits @ W, cast to x's dtype
                    if need_w:
                        if grad_w.dtype == logits.dtype:
                            grad_w.addmm_(logits.t(), x_c)  # dL/dW += dL/dlogits^T @ x
                        else:
                            # dL/dW += dL/dlogits^T @ x, summed in W's dtype; costs a (V, H)
                            # product per chunk (addmm_ cannot mix dtypes on every device)
                            grad_w += logits.t() @ x_c
                    if need_b:
                        grad_b += logits.float().sum(0)  # dL/db += sum over rows of dL/dlogits
                del logits, grad_buf

        ctx.grads = (grad_x, grad_w, None if grad_b is None else grad_b.to(bias.dtype))
        ctx.x_shape = x.shape
        if reduction == "sum":
            return losses.sum()
        return losses.sum() / n_valid

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.grads is None:
            raise RuntimeError(
                "fused_linear_cross_entropy: backward ran twice; the fused gradients are consumed by the first one"
            )
        grad_x, grad_w, grad_b = ctx.grads
        ctx.grads = None
        for g in (grad_x, grad_w, grad_b):
            if g is not None:
                g.mul_(grad_output.to(g.dtype))  # the loss is a scalar: chain rule is a scale
        if grad_x is not None:
            grad_x = grad_x.reshape(ctx.x_shape)
        return grad_x, grad_w, grad_b, None, None, None, None, None, None, None


def fused_linear_cross_entropy(
    x,
    weight,
    target,
    bias=None,
    *,
    ignore_index=-100,
    label_smoothing=0.0,
    reduction="mean",
    z_loss_weight=0.0,
    chunk_rows=None,
):
    """Cross-entropy of `x @ weight.T (+ bias)` against `target`, never materialising all logits.

    x: (..., H) hidden states; weight: (V, H) LM head; bias: (V,) or None; target: (...) ints.
    Same options as `cross_entropy`, but reduction is "mean" or "sum" only. Returns an fp32
    scalar. Gradients for x, weight and bias are computed in the forward, chunk by chunk
    (`chunk_rows` rows at a time; default about N*H/V, at least 256); weight's gradient is
    accumulated in weight's dtype. Under torch.autocast the matmuls run in the autocast dtype
    (as an autocast F.linear would) and the gradients come back in the inputs' dtypes.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be mean or sum, got {reduction!r}")
    target = check_targets(target, weight.shape[0], ignore_index)
    if not use_triton(x, weight, target):
        return fused_linear_cross_entropy_reference(
            x, weight, target, bias, ignore_index, label_smoothing, reduction, z_loss_weight
        )
    device_type = x.device.type
    compute_dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    return FusedLinearCrossEntropyFunction.apply(
        x, weight, bias, target, ignore_index, label_smoothing, reduction, z_loss_weight, chunk_rows, compute_dtype
    )
