"""Benchmark fused_linear_cross_entropy (fwd + bwd) on a GPU: python -m ai4ai_kernels.bench_fused_linear_cross_entropy"""

import torch
import torch.nn.functional as F

if not __package__:  # run as a file: the relative imports below need the package
    print("run as a module: python -m ai4ai_kernels.bench_fused_linear_cross_entropy")
    raise SystemExit(0 if not torch.cuda.is_available() else 2)

from ._bench import compiled, gpu_or_exit, liger, report
from .fused_linear_cross_entropy import fused_linear_cross_entropy


def main():
    gpu_or_exit()
    lk = liger()
    rows, hidden = 8 * 2048, 2048
    for vocab in (32768, 128256):
        x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = (torch.randn(vocab, hidden, device="cuda", dtype=torch.bfloat16) / hidden**0.5).requires_grad_(True)
        target = torch.randint(0, vocab, (rows,), device="cuda")

        def step(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(x, w, target), (x, w))

        eager = lambda x, w, y: F.cross_entropy(F.linear(x, w).float(), y)  # noqa: E731
        cands = [("torch", step(eager)), ("torch.compile", step(compiled(eager))), ("ai4ai", step(fused_linear_cross_entropy))]
        if lk is not None:
            lce = lk.LigerFusedLinearCrossEntropyLoss()
            cands.append(("liger", step(lambda x, w, y: lce(w, x, y))))
        report(f"fused_linear_cross_entropy  rows={rows} hidden={hidden} vocab={vocab} bf16", cands)
        del x, w


if __name__ == "__main__":
    main()
