"""The teacher: a prepared GPT, reachable only through a metered interface. Protected.

    t = Teacher(scale)
    completions = t.generate(prompts)                    # greedy, [B, MAX_NEW]
    completions, logits = t.generate(prompts, return_logits=True)
    logits = t.logits(tokens)                            # [B, T, VOCAB] for any right-padded tokens

Every call is charged in teacher tokens (positions the teacher processes): `generate` charges
each prompt's length plus the tokens it generated (up to and including <eos>); `logits`
charges every non-<pad> token of `tokens`. A run may spend at most `budget_teacher_tokens`
(config.py); a call whose worst case (for `generate`: every prompt decoding MAX_NEW tokens)
would exceed what is left raises `TeacherBudgetExhausted` and is not run. The weights are
artifacts/teacher_<scale>.safetensors, checked against artifacts/SHA256SUMS on load. Use the
teacher only through this class: reading its weights directly bypasses the budget and is not
allowed. In a graded run the weights are not in the training copy at all: the grader's meter,
a process outside the training sandbox, holds the teacher and serves this class, same API.
"""
import hashlib
import os
from pathlib import Path

import torch
from safetensors.torch import load_file

from config import MAX_NEW, PAD, get_scale
from model import build_teacher, greedy_generate

REPO = Path(__file__).resolve().parent


class TeacherBudgetExhausted(RuntimeError):
    """Raised when a call would take the run past its teacher-token budget."""


def load_teacher_weights(scale: str) -> torch.nn.Module:
    path = REPO / "artifacts" / f"teacher_{scale}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    sums = dict(reversed(line.split()) for line in (REPO / "artifacts" / "SHA256SUMS").read_text().splitlines())
    if hashlib.sha256(path.read_bytes()).hexdigest() != sums.get(path.name):
        raise RuntimeError(f"{path}: checksum does not match artifacts/SHA256SUMS")
    model = build_teacher(scale)
    state, params = load_file(str(path)), dict(model.named_parameters())
    if set(state) != set(params):
        raise RuntimeError(f"{path}: keys differ from the teacher's parameters")
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(state[k])
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


class Teacher:
    def __init__(self, scale: str, device: str = "cpu"):
        with torch.random.fork_rng(devices=[]):    # building it draws nothing from the caller's stream
            self._model = load_teacher_weights(scale).to(device)
        self._device = torch.device(device)
        self.budget = get_scale(scale).budget_teacher_tokens
        self.used = 0

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    def _charge(self, worst: int, actual: int) -> None:
        if self.used + worst > self.budget:
            raise TeacherBudgetExhausted(f"teacher budget of {self.budget} tokens: {self.used} used, "
                                         f"this call may need {worst}")
        self.used += actual

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, return_logits: bool = False):
        """Greedy completions of left-padded prompts [B, PROMPT_W] -> [B, MAX_NEW] (and logits [B, MAX_NEW, V])."""
        prompts = prompts.long().cpu()
        plen = int((prompts != PAD).sum())
        if self.used + plen + prompts.shape[0] * MAX_NEW > self.budget:
            self._charge(plen + prompts.shape[0] * MAX_NEW, 0)
        res = greedy_generate(self._model, prompts, return_logits=return_logits)
        comp = res[0] if return_logits else res
        self._charge(0, plen + int((comp != PAD).sum()))
        return res

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, T, VOCAB] (float32, detached) of tokens [B, T] (a prompt as stored, then any continuation)."""
        tokens = tokens.long()
        n = int((tokens != PAD).sum())
        self._charge(n, n)
        return self._model(input_ids=tokens.to(self._device)).logits.float().detach()


if os.environ.get("AI4AI_METER"):
    # A graded run: the teacher lives in the grader's meter, outside the training sandbox.
    from ai4ai_meter import remote
    Teacher = remote(Teacher)
