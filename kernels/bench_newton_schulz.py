"""Benchmark newton_schulz (5 steps, bf16) on a GPU: python -m ai4ai_kernels.bench_newton_schulz"""

import torch

if not __package__:  # run as a file: the relative imports below need the package
    print("run as a module: python -m ai4ai_kernels.bench_newton_schulz")
    raise SystemExit(0 if not torch.cuda.is_available() else 2)

from ._bench import compiled, gpu_or_exit, report
from .newton_schulz import newton_schulz, newton_schulz_reference


def main():
    gpu_or_exit()
    print("note: Liger-Kernel has no Newton-Schulz / Muon kernel; no liger column")
    ref_compiled = compiled(newton_schulz_reference)
    for shape in [(2048, 2048), (5632, 2048), (2048, 5632), (16, 2048, 2048)]:
        G = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        cands = [
            ("torch", lambda: newton_schulz_reference(G)),
            ("torch.compile", lambda: ref_compiled(G)),
            ("ai4ai", lambda: newton_schulz(G)),
        ]
        report(f"newton_schulz  shape={shape} bf16", cands)


if __name__ == "__main__":
    main()
