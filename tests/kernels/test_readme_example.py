"""ai4ai_kernels/README.md's example, run as written on a GPT-2 built the way the frozen repos build
theirs (transformers.GPT2LMHeadModel(GPT2Config(...)), tied embeddings, no dropout)."""

import re
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

README = Path(__file__).resolve().parents[2] / "ai4ai_kernels" / "README.md"


def _example_code():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1, "the README has one python example; this test runs it"
    return blocks[0]


def test_readme_example_runs_on_the_repos_gpt2_and_equals_its_loss():
    cfg = GPT2Config(
        vocab_size=1023,
        n_positions=16,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
    )
    model = GPT2LMHeadModel(cfg).float()
    idx = torch.randint(0, 1023, (3, 16))
    scope = {"model": model, "idx": idx}
    exec(compile(_example_code(), str(README), "exec"), scope)  # noqa: S102 - the README's own code
    loss = scope["loss"]
    assert "FusedLinearCrossEntropy" in type(loss.grad_fn).__name__  # the kernel ran, not a fallback
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    ref = model(input_ids=idx, labels=idx).loss  # HF shifts the labels itself
    ref.backward()
    # fp32 throughout; the tolerance allows for the chunked sums of the head's gradient
    torch.testing.assert_close(loss, ref, atol=1e-5, rtol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{n}: {m}")
