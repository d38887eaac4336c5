"""AdamW step fused into one kernel per tensor (or per flat buffer).

One pass reads param, grad and both moments and writes them back: decoupled weight decay,
moment updates, bias correction and the step, all in fp32 registers. With low-precision
params (bf16), an fp32 master copy can hold the true weights; the kernel updates the master
and writes its rounded value into the param. Matches torch.optim.AdamW (amsgrad=False).
"""

import math

import torch

from ._dispatch import flat_block, tl, triton, use_triton

# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def adamw_step_reference(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    *,
    step,
    lr,
    beta1=0.9,
    beta2=0.999,
    eps=1e-8,
    weight_decay=0.0,
    master_params=None,
):
    """Plain-torch AdamW step over lists of tensors, in place; `step` counts from 1."""
    bc1 = 1.0 - beta1**step
    bc2 = 1.0 - beta2**step
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        w = master_params[i] if master_params is not None else p
        g = g.to(m.dtype)
        w.mul_(1.0 - lr * weight_decay)
        m.lerp_(g, 1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
        w.addcdiv_(m, denom, value=-lr / bc1)
        if master_params is not None:
            p.copy_(w)


# ---------------------------------------------------------------------------------------------
# Triton kernel
# ---------------------------------------------------------------------------------------------


@triton.jit
def _adamw_kernel(
    param_ptr,
    grad_ptr,
    exp_avg_ptr,
    exp_avg_sq_ptr,
    master_ptr,
    n,
    lr,
    beta1,
    beta2,
    eps,
    weight_decay,
    step_size,
    inv_sqrt_bc2,
    HAS_MASTER: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if HAS_MASTER:
        w = tl.load(master_ptr + offs, mask=mask).to(tl.float32)
    else:
        w = tl.load(param_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(grad_ptr + offs, mask=mask).to(tl.float32)
    m = tl.load(exp_avg_ptr + offs, mask=mask).to(tl.float32)
    v = tl.load(exp_avg_sq_ptr + offs, mask=mask).to(tl.float32)

    w = w * (1.0 - lr * weight_decay)  # decoupled decay: w <- w - lr * wd * w
    m = beta1 * m + (1.0 - beta1) * g  # first moment
    v = beta2 * v + (1.0 - beta2) * g * g  # second moment
    denom = tl.sqrt(v) * inv_sqrt_bc2 + eps  # sqrt(v_hat) + eps, v_hat = v / (1 - beta2^t)
    w = w - step_size * m / denom  # step_size = lr / (1 - beta1^t): m_hat folded in

    tl.store(exp_avg_ptr + offs, m.to(exp_avg_ptr.dtype.element_ty), mask=mask)
    tl.store(exp_avg_sq_ptr + offs, v.to(exp_avg_sq_ptr.dtype.element_ty), mask=mask)
    if HAS_MASTER:
        tl.store(master_ptr + offs, w.to(master_ptr.dtype.element_ty), mask=mask)
    tl.store(param_ptr + offs, w.to(param_ptr.dtype.element_ty), mask=mask)


@torch.no_grad()
def adamw_step(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    *,
    step,
    lr,
    beta1=0.9,
    beta2=0.999,
    eps=1e-8,
    weight_decay=0.0,
    master_params=None,
):
    """One AdamW step, in place, over lists of same-shaped tensors (a flat buffer is a list of one).

    params: weights (any float dtype); grads: their gradients; exp_avgs / exp_avg_sqs: the
    moments (fp32 recommended); master_params: optional fp32 copies of params that hold the
    true weights (params then receive their rounded value). `step` is the 1-based step count
    used for bias correction. All tensors must be contiguous.
    """
    tensors = [t for group in (params, grads, exp_avgs, exp_avg_sqs, master_params or []) for t in group]
    if not tensors:
        return
    if not use_triton(*tensors):
        return adamw_step_reference(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            step=step,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            weight_decay=weight_decay,
            master_params=master_params,
        )
    step_size = lr / (1.0 - beta1**step)
    inv_sqrt_bc2 = 1.0 / math.sqrt(1.0 - beta2**step)
    block = flat_block()
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        master = master_params[i] if master_params is not None else None
        for t in (p, g, m, v, master):
            if t is not None and not t.is_contiguous():
                raise ValueError("adamw_step needs contiguous tensors")
        n = p.numel()
        if n == 0:
            continue
        _adamw_kernel[(triton.cdiv(n, block),)](
            p,
            g,
            m,
            v,
            master if master is not None else p,
            n,
            float(lr),
            float(beta1),
            float(beta2),
            float(eps),
            float(weight_decay),
            float(step_size),
            float(inv_sqrt_bc2),
            HAS_MASTER=master is not None,
            BLOCK=block,
            num_warps=4,
        )


class FusedAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW with the fused step above (amsgrad, maximize, foreach not supported).

    master_weights=True keeps an fp32 copy of every non-fp32 param (e.g. bf16) in the state
    and steps that copy; moments are fp32 either way.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, master_weights=False):
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(
                f"invalid AdamW hyperparameters lr={lr} betas={betas} eps={eps} weight_decay={weight_decay}"
            )
        super().__init__(
            params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, master_weights=master_weights)
        )

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdamW does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(
                        p, dtype=torch.float32, memory_format=torch.contiguous_format
                    )
                    if group["master_weights"] and p.dtype != torch.float32:
                        state["master"] = p.detach().float().contiguous()
                state["step"] += 1
                master = state.get("master")
                # one launch per tensor: the step's hyper-parameters are per group, its bias
                # correction per tensor (a param added later has its own step count)
                adamw_step(
                    [p],
                    [p.grad.contiguous()],
                    [state["exp_avg"]],
                    [state["exp_avg_sq"]],
                    step=state["step"],
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    master_params=None if master is None else [master],
                )
        return loss
