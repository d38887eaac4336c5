"""Benchmark token_logprobs (fwd + bwd) on a GPU: python -m ai4ai_kernels.bench_logprobs"""

import torch

if not __package__:  # run as a file: the relative imports below need the package
    print("run as a module: python -m ai4ai_kernels.bench_logprobs")
    raise SystemExit(0 if not torch.cuda.is_available() else 2)

from ._bench import compiled, gpu_or_exit, report
from .logprobs import token_logprobs


def main():
    gpu_or_exit()
    print("note: Liger-Kernel has no per-token log-prob op with this contract; no liger column")
    rows = 8 * 2048
    for vocab in (32768, 128256):
        logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, vocab, (rows,), device="cuda")
        weights = torch.randn(rows, device="cuda")  # stands in for advantages

        def step(fn):
            return lambda: torch.autograd.grad((fn(logits, target) * weights).sum(), logits)

        eager = lambda z, y: torch.log_softmax(z.float(), -1).gather(-1, y[:, None]).squeeze(-1)  # noqa: E731
        cands = [("torch", step(eager)), ("torch.compile", step(compiled(eager))), ("ai4ai", step(token_logprobs))]
        report(f"token_logprobs  rows={rows} vocab={vocab} bf16", cands)
        del logits


if __name__ == "__main__":
    main()
