"""The hidden prompt generator, the demonstration and preference-pair makers, and the verifier.

A prompt is `<task> <args>|<fmt>>`; the answer follows the `>` and ends with EOS (token 0).
Tasks (the verifiable part): `add a b` (the sum of two 3-digit numbers), `max a b c d` (the
largest of four 2-digit numbers), `rev w` (a 4-7 letter mixed-case word reversed). Format constraints (exactly one):
    !   end with '!'                 [   wrap in '[' ']'
    #   start with '#'               pN  pad with '.' to exactly N characters (a length)
    d   the answer twice, '-' between
    U   upper case (rev only)        L   lower case (rev only)
The verifier checks the constraint first, strips it, then checks the answer.
"""

from __future__ import annotations

import numpy as np

FMTS_ALL = ("!", "[", "#", "p", "d")
FMTS_CASE = ("U", "L")
TASKS = ("add", "max", "rev")
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# How hard the verifiable part is. Until 2026-12-03 `add` was a 2-digit number plus a digit, `max` took
# three numbers and `rev` 3-4 letters: there supervised fine-tuning on the chosen answers alone
# (Preferred-FT, 8 passes over the served pairs, inside the CPU cap) scored 0.925 at smoke, so a
# known method nearly solved the task. Carries over three digits, a fourth number and longer words
# keep the same rules and make the answers cost more to learn (the conf/task/dpo.yaml comments).
ADD_RANGE = (100, 1000)  # both operands of `add`
MAX_RANGE, MAX_N = (10, 100), 4
REV_LEN = (4, 8)  # letters of a `rev` word, the upper bound excluded


# --------------------------------------------------------------------------- prompts


def _fmts(task: str) -> tuple:
    return FMTS_ALL + (FMTS_CASE if task == "rev" else ())


def sample_prompt(rng: np.random.Generator) -> dict:
    """One prompt: {'task', 'args', 'fmt', 'core', 'x'} (x in [0, 1]: a feature of the prompt)."""
    task = TASKS[rng.integers(len(TASKS))]
    if task == "add":
        a, b = int(rng.integers(*ADD_RANGE)), int(rng.integers(*ADD_RANGE))
        args, core, x = f"{a} {b}", str(a + b), (a - ADD_RANGE[0]) / (ADD_RANGE[1] - 1 - ADD_RANGE[0])
    elif task == "max":
        v = [int(t) for t in rng.integers(*MAX_RANGE, MAX_N)]
        args, core, x = " ".join(map(str, v)), str(max(v)), (v[0] - MAX_RANGE[0]) / (MAX_RANGE[1] - 1 - MAX_RANGE[0])
    else:
        n = int(rng.integers(*REV_LEN))
        w = "".join(LETTERS[i] for i in rng.integers(0, len(LETTERS), n))
        args, core, x = w, w[::-1], LETTERS.index(w[0]) % 26 / 25
    fs = _fmts(task)
    fmt = fs[rng.integers(len(fs))]
    if fmt == "p":
        fmt = f"p{int(rng.integers(len(core) + 1, 10))}"
    return {"task": task, "args": args, "fmt": fmt, "core": core, "x": float(x)}


def prompt_text(p: dict) -> str:
    return f"{p['task']} {p['args']}|{p['fmt']}>"


def apply_fmt(core: str, fmt: str) -> str:
    if fmt == "!":
        return core + "!"
    if fmt == "[":
        return "[" + core + "]"
    if fmt == "#":
        return "#" + core
    if fmt == "d":
        return core + "-" + core
    if fmt == "U":
        return core.upper()
    if fmt == "L":
        return core.lower()
    if fmt.startswith("p"):
        return core + "." * (int(fmt[1:]) - len(core))
    raise ValueError(fmt)


def target(p: dict) -> str:
    """The canonical answer: correct and meeting the constraint."""
    return apply_fmt(p["core"], p["fmt"])


# --------------------------------------------------------------------------- verifier


def strip_fmt(out: str, fmt: str) -> str | None:
    """The answer inside `out` if `out` meets the constraint `fmt`, else None."""
    if fmt == "!":
        return out[:-1] if out.endswith("!") and len(out) > 1 else None
    if fmt == "[":
        return out[1:-1] if len(out) > 2 and out[0] == "[" and out[-1] == "]" else None
    if fmt == "#":
        return out[1:] if len(out) > 1 and out[0] == "#" else None
    if fmt == "d":
        h = out.split("-")
        return h[0] if len(h) == 2 and h[0] == h[1] and h[0] else None
    if fmt in ("U", "L"):
        ok = out == (out.upper() if fmt == "U" else out.lower())
        return out if ok and out else None
    if fmt.startswith("p"):
        core = out.rstrip(".")
        return core if len(out) == int(fmt[1:]) and core else None
    raise ValueError(fmt)


def answer_ok(p: dict, core: str) -> bool:
    if p["task"] == "rev":
        want = p["core"]
        if p["fmt"] in ("U", "L"):  # the case constraint overrides the letters' case
            return core.lower() == want.lower()
        return core == want
    return core == p["core"]


def verify(p: dict, out: str) -> tuple[bool, bool]:
    """(meets the constraint, answers correctly) for a generated string `out`."""
    core = strip_fmt(out, p["fmt"])
    if core is None:
        return False, False
    return True, answer_ok(p, core)


# --------------------------------------------------------------------------- noisy demos, pairs


def wrong_core(p: dict, rng: np.random.Generator) -> str:
    """A plausible wrong answer (never the right one)."""
    core = p["core"]
    for _ in range(20):
        if p["task"] in ("add", "max"):
            r = rng.random()
            if p["task"] == "max" and r < 0.4:
                w = p["args"].split()[int(rng.integers(3))]
            elif r < 0.7:
                i = int(rng.integers(len(core)))
                d = str(int(rng.integers(1 if i == 0 else 0, 10)))
                w = core[:i] + d + core[i + 1 :]
            else:
                w = str(int(core) + int(rng.choice([-10, -1, 1, 10])))
        else:
            r = rng.random()
            if r < 0.3:
                w = p["args"]  # not reversed
            elif r < 0.7:
                i = int(rng.integers(len(core) - 1))
                w = core[:i] + core[i + 1] + core[i] + core[i + 2 :]
            else:
                i = int(rng.integers(len(core)))
                w = core[:i] + core[i].swapcase() + core[i + 1 :]
        if not answer_ok(p, w) and w:
            return w
    return core + core[-1]


def wrong_fmt(p: dict, core: str, rng: np.random.Generator) -> str:
    """`core` in a format that breaks the constraint (usually: the constraint ignored)."""
    fmt = p["fmt"]
    if rng.random() < 0.6:
        out = core
    elif fmt == "!":
        out = core + "."
    elif fmt == "[":
        out = "[" + core
    elif fmt == "#":
        out = "*" + core
    elif fmt == "d":
        out = core + core
    elif fmt in ("U", "L"):
        out = core.swapcase()
    else:
        n = int(fmt[1:]) + int(rng.choice([-1, 1]))
        out = core + "." * max(0, n - len(core))
    if strip_fmt(out, fmt) is not None:  # e.g. an all-upper word under U: break it
        out = {"U": core.lower() + "!", "L": core.upper() + "!"}.get(fmt, core + "*")
    return out


def follow_rate(p: dict, directions: dict) -> float:
    """How often the demonstrations follow the constraint: varies with the prompt, 0.2..0.8."""
    key = p["task"] + ":" + p["fmt"][0]
    x = p["x"] if directions[key] > 0 else 1 - p["x"]
    return 0.2 + 0.6 * x


def directions(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    keys = [t + ":" + f for t in TASKS for f in _fmts(t)]
    return {k: int(rng.choice([-1, 1])) for k in keys}


CORRECT_RATE = 0.7  # how often a demonstration's answer is right


def demo(p: dict, rng: np.random.Generator, dirs: dict) -> str:
    """A demonstration: right only part of the time, follows the format only part of the time."""
    core = p["core"] if rng.random() < CORRECT_RATE else wrong_core(p, rng)
    if rng.random() < follow_rate(p, dirs):
        return apply_fmt(core, p["fmt"])
    return wrong_fmt(p, core, rng)


def pair(p: dict, rng: np.random.Generator) -> tuple[str, str]:
    """(chosen, rejected): chosen is right and meets the constraint; rejected fails one of them."""
    chosen = target(p)
    if rng.random() < 0.5:
        rejected = wrong_fmt(p, p["core"], rng)  # right answer, format broken
    else:
        rejected = apply_fmt(wrong_core(p, rng), p["fmt"])  # format met, answer wrong
    return chosen, rejected
