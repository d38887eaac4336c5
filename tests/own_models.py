"""Tiny Hugging Face models of two architectures, made and saved the way a user's model would be.

Random-initialised from a config (no hub: nothing is downloaded), with a tokenizer trained here on
printable ASCII with the `tokenizers` library, wrapped as PreTrainedTokenizerFast and saved beside
the weights with save_pretrained, so the harness loads them exactly as it loads a real model.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch

# Text the tokenizers are trained on: every printable ASCII character, in words and alone, so each
# is a token of its own (merges add longer tokens, as a real vocabulary has).
CORPUS = [
    string.printable[:95],
    "the quick brown fox jumps over the lazy dog",
    "0123456789 ABCDEF abc=;:>",
    "Hello, World! [x] #tag *bold* - item.",
    "a|b$c_d e",
] * 20


def _words(n: int = 6000, seed: int = 0) -> list:
    """Lines of random letter words: enough distinct pairs for a BPE vocabulary of a few thousand."""
    import random

    r = random.Random(seed)
    words = ["".join(r.choice(string.ascii_letters) for _ in range(r.randint(3, 9))) for _ in range(n)]
    return [" ".join(words[i : i + 20]) for i in range(0, n, 20)]


def _tokenizer(kind: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = CORPUS if vocab_size <= 320 else CORPUS + _words()  # the small vocabulary as it always was
    if kind == "gpt2":  # byte-level BPE, one special token that is both <bos> and <eos> (as GPT-2's)
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        specials = ["<|endoftext|>"]
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
        tk.train_from_iterator(corpus, trainer)
        return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    if kind == "llama":  # BPE with <unk>, <s>, </s> and no pad token (as Llama's)
        tk = Tokenizer(models.BPE(unk_token="<unk>"))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<unk>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tk.train_from_iterator(corpus, trainer)
        return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if kind == "digits":  # a vocabulary of digits alone: cannot encode letters or punctuation
        tk = Tokenizer(
            models.WordLevel(
                {"[UNK]": 0, "[EOS]": 1, **{d: i + 2 for i, d in enumerate("0123456789")}}, unk_token="[UNK]"
            )
        )
        tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="[EOS]", unk_token="[UNK]")
    raise ValueError(kind)


def save_model(
    dest: Path,
    arch: str,
    tokenizer: str | None = None,
    n_positions: int = 128,
    seed: int = 0,
    vocab_size: int = 320,
    memorising: bool = False,
) -> Path:
    """A tiny random-initialised causal LM of `arch` (gpt2 | llama) with its tokenizer, saved in `dest`
    (a vocabulary of `vocab_size` tokens: unlearning's 2,157 symbols need more than the default).

    `memorising`: the gpt2 is made to memorise unlearning's facts in a few hundred CPU steps (the
    tests' shrunk recipe), as the llama already is: input and output embeddings untied and no
    dropout. Tied at this size (32 wide, the output softmax over 2,157 symbols pushing on the same
    rows the prompt reads) it learned no fact in 400 steps (0.0% at lr 1e-2 or 5e-3, 0.7% without
    dropout) and answered UNKNOWN to every prompt; untied, no dropout: 19% at lr 1e-2."""
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    tok = _tokenizer(tokenizer or arch, vocab_size=vocab_size)
    if arch == "gpt2":
        fast = dict(tie_word_embeddings=False, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0) if memorising else {}
        cfg = GPT2Config(
            vocab_size=len(tok),
            n_positions=n_positions,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            **fast,
        )
    elif arch == "llama":
        cfg = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=n_positions,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            tie_word_embeddings=False,
        )
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest
