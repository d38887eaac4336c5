"""Benchmark kl_div (fwd + bwd to the student) on a GPU: python -m ai4ai_kernels.bench_kl_div"""

import torch
import torch.nn.functional as F

if not __package__:  # run as a file: the relative imports below need the package
    print("run as a module: python -m ai4ai_kernels.bench_kl_div")
    raise SystemExit(0 if not torch.cuda.is_available() else 2)

from ._bench import compiled, gpu_or_exit, liger, report
from .kl_div import kl_div, kl_div_reference


def main():
    gpu_or_exit()
    lk = liger()
    rows = 8 * 2048
    for vocab in (32768, 128256):
        s = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        t = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)

        def step(fn):
            return lambda: torch.autograd.grad(fn(s, t), s)

        cands = [("torch", step(kl_div_reference)), ("torch.compile", step(compiled(kl_div_reference))), ("ai4ai", step(kl_div))]
        if lk is not None:  # Liger's KL takes log-probabilities: the log-softmaxes are part of its cost
            kl = lk.LigerKLDIVLoss(reduction="batchmean", log_target=True)
            cands.append(("liger", step(lambda s, t: kl(F.log_softmax(s.float(), -1), F.log_softmax(t.float(), -1)))))
        report(f"kl_div forward  rows={rows} vocab={vocab} bf16", cands)
        del s, t


if __name__ == "__main__":
    main()
