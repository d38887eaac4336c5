"""Newton-Schulz orthogonalisation (the heart of Muon), with a small Muon optimizer on top.

For a matrix G (m x n, m <= n after a transpose), X0 = G / ||G||_F and five iterations of
    A = X X^T;   B = b A + c A A;   X = a X + B X
with (a, b, c) = (3.4445, -4.7750, 2.0315) push every singular value of X towards ~1 (into
roughly [0.7, 1.2]), i.e. X ~ U V^T for G = U S V^T. Each line is one Triton matmul whose
epilogue does the scaled add, so B and the new X are written once, accumulated in fp32.
Leading dims are a batch (one grid axis).
"""

import torch

from ._dispatch import interpreting, matmul_blocks, tl, triton, use_triton

NS_COEFFS = (3.4445, -4.7750, 2.0315)

# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


def newton_schulz_reference(G, steps=5, eps=1e-7, dtype=None):
    """Plain torch Newton-Schulz on the last two dims of G, iterated in `dtype` (default G's)."""
    a, b, c = NS_COEFFS
    X = G.to(dtype or G.dtype)
    tall = G.shape[-2] > G.shape[-1]
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if tall:
        X = X.mT
    return X.to(G.dtype)


# ---------------------------------------------------------------------------------------------
# Triton kernel: out = alpha * (A @ B) + beta * C, batched over grid axis 2
# ---------------------------------------------------------------------------------------------


@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    out_ptr,
    M,
    N,
    K,
    s_ab,
    s_am,
    s_ak,
    s_bb,
    s_bk,
    s_bn,
    s_cb,
    s_cm,
    s_cn,
    s_ob,
    s_om,
    s_on,
    alpha,
    beta,
    HAS_C: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_base = a_ptr + batch * s_ab
    b_base = b_ptr + batch * s_bb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(
            a_base + rm[:, None] * s_am + kk[None, :] * s_ak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(
            b_base + kk[:, None] * s_bk + rn[None, :] * s_bn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        if UPCAST:  # the interpreter's tl.dot mishandles bf16 operands; exact in fp32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    out = alpha * acc
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_C:
        c = tl.load(c_ptr + batch * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn, mask=mask, other=0.0).to(tl.float32)
        out += beta * c
    tl.store(
        out_ptr + batch * s_ob + rm[:, None] * s_om + rn[None, :] * s_on, out.to(out_ptr.dtype.element_ty), mask=mask
    )


def _matmul(a, b, out, alpha=1.0, c=None, beta=0.0):
    """out[i] = alpha * a[i] @ b[i] + beta * c[i] for 3-D (batch, ., .) views; returns out."""
    nb, M, K = a.shape
    N = b.shape[2]
    bm, bn, bk = matmul_blocks()
    kw = {} if interpreting() else dict(num_warps=4, num_stages=3)
    cc = c if c is not None else out
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn), nb)
    _matmul_kernel[grid](
        a,
        b,
        cc,
        out,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        a.stride(2),
        b.stride(0),
        b.stride(1),
        b.stride(2),
        cc.stride(0),
        cc.stride(1),
        cc.stride(2),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        float(alpha),
        float(beta),
        HAS_C=c is not None,
        UPCAST=interpreting() and a.dtype == torch.bfloat16,
        # fp32 in, fp32 products: tl.dot's default on a GPU is TF32 (10-bit mantissa), which was seen
        # 1e-3 off torch's fp32 matmul on an H200; bf16 operands use the tensor cores either way
        PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        BM=bm,
        BN=bn,
        BK=bk,
        **kw,
    )
    return out


def _newton_schulz_triton(G, steps, eps, dtype):
    a, b, c = NS_COEFFS
    shape = G.shape
    X = G.reshape(-1, shape[-2], shape[-1]).to(dtype or G.dtype)
    tall = shape[-2] > shape[-1]
    if tall:
        X = X.mT
    # normalise in fp32 so that the spectral norm is <= 1 (Frobenius >= spectral)
    norm = X.float().norm(dim=(-2, -1), keepdim=True)
    X = (X.float() / (norm + eps)).to(X.dtype).contiguous()
    nb, m, n = X.shape
    A = torch.empty(nb, m, m, dtype=X.dtype, device=X.device)
    B = torch.empty_like(A)
    Y = torch.empty_like(X)
    for _ in range(steps):
        _matmul(X, X.mT, A)  # A = X X^T (X^T is a strided view: no copy)
        _matmul(A, A, B, alpha=c, c=A, beta=b)  # B = c A A + b A
        _matmul(B, X, Y, alpha=1.0, c=X, beta=a)  # X' = B X + a X, into the other buffer
        X, Y = Y, X
    if tall:
        X = X.mT
    return X.reshape(shape).to(G.dtype)


def newton_schulz(G, steps=5, eps=1e-7, dtype=None):
    """Approximately orthogonalise G (..., m, n): returns ~U V^T for G = U S V^T, same shape/dtype.

    The iteration runs in `dtype` (default: G's dtype; Muon usually uses torch.bfloat16),
    with fp32 accumulation inside each matmul. Not differentiable (an optimizer step).
    """
    if G.ndim < 2:
        raise ValueError(f"newton_schulz needs a matrix, got shape {tuple(G.shape)}")
    with torch.no_grad():
        if not use_triton(G):
            return newton_schulz_reference(G, steps, eps, dtype)
        return _newton_schulz_triton(G, steps, eps, dtype)


class Muon(torch.optim.Optimizer):
    """Muon for matrix params: momentum, then an orthogonalised step via `newton_schulz`.

    update = NS(nesterov ? g + momentum * buf : buf), buf = momentum * buf + g, scaled by
    sqrt(max(1, rows / cols)); decoupled weight decay. Params of ndim > 2 are flattened to
    (shape[0], -1). Use AdamW for embeddings, heads, norms and biases.
    """

    def __init__(
        self, params, lr=0.02, momentum=0.95, nesterov=True, weight_decay=0.0, ns_steps=5, ns_dtype=torch.bfloat16
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                nesterov=nesterov,
                weight_decay=weight_decay,
                ns_steps=ns_steps,
                ns_dtype=ns_dtype,
            ),
        )

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.ndim < 2:
                    raise ValueError("Muon only steps matrices; give 0-d/1-d params to AdamW")
                g = p.grad.float()
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                buf = state["momentum_buffer"]
                buf.mul_(group["momentum"]).add_(g)
                u = g.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf
                u2 = u.reshape(u.shape[0], -1)
                o = newton_schulz(u2, steps=group["ns_steps"], dtype=group["ns_dtype"]).float()
                o = o * max(1.0, u2.shape[0] / u2.shape[1]) ** 0.5
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.add_(o.reshape(p.shape).to(p.dtype), alpha=-group["lr"])
        return loss
