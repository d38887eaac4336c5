"""The reward: a fixed, visible scorer. Protected.

reward(x) = P_clf(TARGET_CLASS | x) * thin(x) * (1 - P_clf(JUNK | x)), in [0, 1]:
  - P_clf: a small MLP classifier with eleven classes, the ten digits and "junk" (noise,
    shuffled pixels, constant images, faded digits, digits under heavy noise), trained by
    prepare.py on data/digits_a.u8 and junk made by `make_junk` (artifacts/scorer.safetensors);
  - thin(x) = sigmoid((INK_THRESHOLD - ink(x)) / INK_TEMPERATURE), ink = mean pixel value
    with pixels mapped to [0, 1]: a 3 drawn with thin strokes (ink 0.22 or less) scores above
    0.95, a typical real 3 (ink 0.30) under 0.01, the thinnest real 3s (ink 0.25) about 0.4.
So the reward asks for a clear, real-looking 3 with thin strokes. Images are clipped to
[-1, 1] first; a non-finite image scores 0.
"""
import torch
from safetensors.torch import load

from config import INK_TEMPERATURE, INK_THRESHOLD, TARGET_CLASS
from data import ARTIFACTS, read_checked


JUNK = 10


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


def thin(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid((INK_THRESHOLD - ink(x)) / INK_TEMPERATURE)


def load_scorer() -> Classifier:
    clf = Classifier()
    clf.load_state_dict(load(read_checked(ARTIFACTS / "scorer.safetensors")))
    return clf.eval().requires_grad_(False)


def reward(clf: Classifier, x: torch.Tensor) -> torch.Tensor:
    """[B, 64] samples -> [B] rewards in [0, 1] (differentiable in x where finite)."""
    finite = torch.isfinite(x).all(-1)
    xc = torch.where(finite[:, None], x, torch.zeros_like(x)).clamp(-1, 1)
    p = torch.softmax(clf(xc), -1)
    r = p[:, TARGET_CLASS] * thin(xc) * (1 - p[:, JUNK])
    return torch.where(finite, r, torch.zeros_like(r))
