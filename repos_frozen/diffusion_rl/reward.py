"""The reward: a fixed, visible scorer. Protected.

reward(x, c) = P_clf(c | x) * thin_c(x) * (1 - P_clf(JUNK | x)), in [0, 1], for an image x made
for the prompt c (a digit):
  - P_clf: a small MLP classifier with eleven classes, the ten digits and "junk" (noise,
    shuffled pixels, constant images, faded digits, digits under heavy noise), trained by
    prepare.py on data/digits_a.u8 and junk made by `make_junk` (artifacts/scorer.safetensors);
  - thin_c(x) = sigmoid((INK_THRESHOLDS[c] - ink(x)) / INK_TEMPERATURE), ink = mean pixel value
    with pixels mapped to [0, 1]: 0.5 at the prompt's threshold, above 0.95 at 0.03 below it.
    The thresholds (config.py) differ by digit, from 0.22 for a 0 (thinner than almost every
    real 0; a typical one has ink 0.31) to 0.31 for a 9 (most real 9s already qualify).
So the reward asks for a clear, real-looking digit of the prompt's class with thin strokes;
some prompts are much harder than others. Images are clipped to [-1, 1] first; a non-finite
image scores 0.
"""
import torch
from safetensors.torch import load

from config import INK_TEMPERATURE, INK_THRESHOLDS
from data import ARTIFACTS, read_checked


JUNK = 10


def check_prompts(c, n: int) -> torch.Tensor:
    """c as a long tensor [n] of digits, or a ValueError that says what is wrong."""
    c = torch.as_tensor(c)
    if c.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8) or c.shape != (n,):
        raise ValueError(f"prompts must be {n} integers (one digit per image), got {tuple(c.shape)} {c.dtype}")
    if n and (int(c.min()) < 0 or int(c.max()) >= len(INK_THRESHOLDS)):
        raise ValueError(f"prompts must be digits 0..{len(INK_THRESHOLDS) - 1}")
    return c.long()


class Classifier(torch.nn.Module):
    def __init__(self, width: int = 64, n_classes: int = 11):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.SiLU(), torch.nn.Linear(width, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_junk(x: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """n off-domain images from real ones x [N, 64]: noise, shuffled, constant, faded, noisy."""
    kind = torch.randint(0, 6, (n,), generator=g)
    base = x[torch.randint(0, len(x), (n,), generator=g)]
    srcs = [torch.rand(n, 64, generator=g) * 2 - 1,
            torch.randn(n, 64, generator=g) * (0.3 + 1.5 * torch.rand(n, 1, generator=g)),
            base.gather(1, torch.rand(n, 64, generator=g).argsort(-1)),
            (torch.rand(n, 1, generator=g) * 2 - 1).expand(n, 64),
            (base + 1) * (0.2 + 0.4 * torch.rand(n, 1, generator=g)) - 1,
            base + torch.randn(n, 64, generator=g) * (0.5 + 0.7 * torch.rand(n, 1, generator=g))]
    out = torch.empty(n, 64)
    for k, src in enumerate(srcs):
        out[kind == k] = src[kind == k]
    return out.clamp(-1, 1)


def ink(x: torch.Tensor) -> torch.Tensor:
    """Mean ink of images in [-1, 1] -> [B] in [0, 1]."""
    return ((x.clamp(-1, 1) + 1) / 2).mean(-1)


def thin(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The stroke term of images x [B, 64] for prompts c [B] -> [B]."""
    threshold = torch.tensor(INK_THRESHOLDS, dtype=x.dtype, device=x.device)[c]
    return torch.sigmoid((threshold - ink(x)) / INK_TEMPERATURE)


def load_scorer() -> Classifier:
    clf = Classifier()
    clf.load_state_dict(load(read_checked(ARTIFACTS / "scorer.safetensors")))
    return clf.eval().requires_grad_(False)


def reward(clf: Classifier, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """[B, 64] samples for prompts c [B] (digits) -> [B] rewards in [0, 1] (differentiable in x where finite)."""
    c = check_prompts(c, len(x)).to(x.device)
    finite = torch.isfinite(x).all(-1)
    xc = torch.where(finite[:, None], x, torch.zeros_like(x)).clamp(-1, 1)
    p = torch.softmax(clf(xc), -1)
    r = p.gather(1, c[:, None])[:, 0] * thin(xc, c) * (1 - p[:, JUNK])
    return torch.where(finite, r, torch.zeros_like(r))
