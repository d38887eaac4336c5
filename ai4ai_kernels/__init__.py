"""ai4ai_kernels: Triton fused loss and optimizer kernels, each with a plain-torch reference.

Public functions (each falls back to its torch reference, with one warning per process, when
the inputs are not on CUDA and TRITON_INTERPRET is not 1, or triton is missing):

    cross_entropy(logits, target, *, ignore_index, label_smoothing, reduction, z_loss_weight)
    fused_linear_cross_entropy(x, weight, target, bias=None, *, ..., chunk_rows=None)
    token_logprobs(logits, target, *, temperature, ignore_index)
    kl_div(student_logits, teacher_logits, *, direction, temperature, reduction)
    adamw_step(params, grads, exp_avgs, exp_avg_sqs, *, step, lr, ..., master_params=None)
    FusedAdamW(params, lr, betas, eps, weight_decay, master_weights=False)
    newton_schulz(G, steps=5, eps=1e-7, dtype=None)
    Muon(params, lr, momentum, nesterov, weight_decay, ns_steps, ns_dtype)

The references are exported as `<name>_reference`.
"""

from .adamw import FusedAdamW, adamw_step, adamw_step_reference
from .cross_entropy import cross_entropy, cross_entropy_reference
from .fused_linear_cross_entropy import fused_linear_cross_entropy, fused_linear_cross_entropy_reference
from .kl_div import kl_div, kl_div_reference
from .logprobs import token_logprobs, token_logprobs_reference
from .newton_schulz import Muon, newton_schulz, newton_schulz_reference

__all__ = [
    "cross_entropy",
    "cross_entropy_reference",
    "fused_linear_cross_entropy",
    "fused_linear_cross_entropy_reference",
    "token_logprobs",
    "token_logprobs_reference",
    "kl_div",
    "kl_div_reference",
    "adamw_step",
    "adamw_step_reference",
    "FusedAdamW",
    "newton_schulz",
    "newton_schulz_reference",
    "Muon",
]
