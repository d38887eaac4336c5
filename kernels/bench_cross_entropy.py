"""Benchmark cross_entropy (forward + backward) on a GPU: python -m ai4ai_kernels.bench_cross_entropy"""

import torch
import torch.nn.functional as F

if not __package__:  # run as a file: the relative imports below need the package
    print("run as a module: python -m ai4ai_kernels.bench_cross_entropy")
    raise SystemExit(0 if not torch.cuda.is_available() else 2)

from ._bench import compiled, gpu_or_exit, liger, report
from .cross_entropy import cross_entropy


def main():
    gpu_or_exit()
    lk = liger()
    rows = 8 * 2048  # batch x seq
    for vocab in (32768, 128256):
        logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, vocab, (rows,), device="cuda")

        def step(loss_fn):
            return lambda: torch.autograd.grad(loss_fn(logits, target), logits)

        eager = lambda z, y: F.cross_entropy(z.float(), y)  # noqa: E731
        cands = [("torch", step(eager)), ("torch.compile", step(compiled(eager))), ("ai4ai", step(cross_entropy))]
        if lk is not None:
            cands.append(("liger", step(lk.LigerCrossEntropyLoss())))
        report(f"cross_entropy  rows={rows} vocab={vocab} bf16", cands)
        del logits


if __name__ == "__main__":
    main()
