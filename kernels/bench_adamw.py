"""Benchmark the FusedAdamW step on a GPU: python -m ai4ai_kernels.bench_adamw"""

import torch

if not __package__:  # run as a file: the relative imports below need the package
    print("run as a module: python -m ai4ai_kernels.bench_adamw")
    raise SystemExit(0 if not torch.cuda.is_available() else 2)

from ._bench import compiled, gpu_or_exit, report
from .adamw import FusedAdamW


def _params():
    """Shapes of a ~0.6B-parameter transformer: 8 layers, hidden 2048, MLP 5632, vocab 32k."""
    shapes = [(32000, 2048)]
    for _ in range(8):
        shapes += [(2048, 2048)] * 4 + [(5632, 2048), (5632, 2048), (2048, 5632), (2048,), (2048,)]
    ps = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
    for p in ps:
        p.grad = torch.randn_like(p) * 1e-3
    return ps


def main():
    gpu_or_exit()
    print("note: Liger-Kernel has no optimizer kernels; no liger column")
    kw = dict(lr=1e-4, weight_decay=0.1)
    opts = {
        "torch": torch.optim.AdamW(_params(), foreach=True, **kw),
        "torch fused": torch.optim.AdamW(_params(), fused=True, **kw),
        "ai4ai": FusedAdamW(_params(), **kw),
    }
    cands = [(name, opt.step) for name, opt in opts.items()]
    cands.insert(1, ("torch.compile", compiled(torch.optim.AdamW(_params(), foreach=True, **kw).step)))
    n = sum(p.numel() for p in opts["ai4ai"].param_groups[0]["params"])
    report(f"AdamW step  {n / 1e9:.2f}B fp32 params", cands)


if __name__ == "__main__":
    main()
