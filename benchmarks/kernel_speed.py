"""Kernel benchmark: ai4ai_kernels against torch eager, torch.compile and Liger-Kernel, one GPU.

    python benchmarks/kernel_speed.py                       # the whole sweep (tens of minutes on an H200)
    python benchmarks/kernel_speed.py --quick               # rows 4096,16384 x vocab 32000,151936, 10 reps
    python benchmarks/kernel_speed.py --ops flce,ce --rows 16384 --vocab 128256 --hidden 4096 --out DIR

One table per op. Each row is one (shape, implementation): forward, backward and full step
(forward + backward) times as p20/p50/p80 over --reps CUDA-event-timed repetitions after
--warmup untimed ones (torch.compile compiles during warm-up), and the absolute peak of
allocated memory during one step (inputs, weights and returned gradients included; `inputs`
says how much of it the inputs alone hold). Every implementation is first checked on the GPU
against an fp32 torch reference on the first --check-rows rows of the same shape; one that
fails the check is reported and not timed. Torch eager is the op as a research repo writes it
in the benchmark's dtype (no extra `.float()` copy of the logits). Our fused losses compute
their gradients during the forward: their forward column includes that work and their
backward is a scale.

Writes kernels.csv and kernels.json (with GPU name, driver, CUDA, torch, triton, Liger and the
git commit) under --out (default: $OUT if set, else outputs/benchmarks/kernels/<time>).
Without a GPU it says so, runs a tiny CPU sanity pass of the same code (correctness checks
and CPU wall times, no benchmark value) and exits 0.

Published figures to compare with (fused linear CE, H=4096, V=128256, bf16, 32k rows): Liger
5.8 GB peak vs 27.6 GB for eager on an A100, slower than eager at every size; Apple's Cut
Cross-Entropy 1.2 GB vs 28 GB, faster than torch.compile.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ("flce", "ce", "logprobs", "kl", "adamw", "newton_schulz")
TITLES = {
    "flce": "fused_linear_cross_entropy (LM head + CE; grads to x and W)",
    "ce": "cross_entropy (grads to logits)",
    "logprobs": "token_logprobs (sum of advantage-weighted log-probs; grads to logits)",
    "kl": "kl_div forward KL, batchmean (grads to the student)",
    "adamw": "AdamW step (fp32 params)",
    "newton_schulz": "newton_schulz (5 steps, Muon's orthogonalisation)",
}


def load_kernels():
    """The ai4ai_kernels of this checkout (ROOT/ai4ai_kernels), whatever an editable install points at."""
    if "ai4ai_kernels" in sys.modules:
        return sys.modules["ai4ai_kernels"]
    spec = importlib.util.spec_from_file_location(
        "ai4ai_kernels",
        ROOT / "ai4ai_kernels" / "__init__.py",
        submodule_search_locations=[str(ROOT / "ai4ai_kernels")],
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["ai4ai_kernels"] = module
    spec.loader.exec_module(module)
    return module


def liger_module():
    """liger_kernel.transformers, or None (its columns are then left out, with a note)."""
    try:
        import liger_kernel.transformers as lk

        return lk
    except Exception as e:  # noqa: BLE001 - any failure means: not comparable here
        print(f"note: Liger-Kernel not importable ({type(e).__name__}); no liger rows")
        return None


# ---------------------------------------------------------------------------------------------
# the environment a number was measured in
# ---------------------------------------------------------------------------------------------


def _cmd(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device):
    env = {
        "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "driver": _cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if device == "cuda"
        else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "git_commit": _cmd(["git", "-C", str(ROOT), "rev-parse", "HEAD"]),
        # uncommitted edits to the kernels make the commit an incomplete description
        "kernels_dirty": bool(_cmd(["git", "-C", str(ROOT), "status", "--porcelain", "--", "ai4ai_kernels"])),
        "kernels_path": str(Path(load_kernels().__file__).parent),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0") == "1",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv[1:],
    }
    for mod in ("triton", "liger_kernel"):
        try:
            env[mod] = str(getattr(__import__(mod), "__version__", "unknown"))
        except Exception:  # noqa: BLE001 - absent or broken: recorded as None
            env[mod] = None
    return env


# ---------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    op: str
    shape: str
    dtype: str
    impl: str
    status: str  # ok | wrong | failed
    check_rel_err: float | None = None
    fwd_ms: list = field(default_factory=list)  # [p20, p50, p80]
    bwd_ms: list = field(default_factory=list)
    step_ms: list = field(default_factory=list)
    peak_gib: float | None = None
    inputs_gib: float | None = None
    note: str = ""


def percentiles(xs):
    """[p20, p50, p80] of a list of times (linear interpolation, as numpy's default)."""
    if not xs:
        return []
    q = statistics.quantiles(xs, n=10, method="inclusive") if len(xs) > 1 else [xs[0]] * 9
    return [q[1], statistics.median(xs), q[7]]


class Clock:
    """Time spans of one repetition: CUDA events on a GPU (no host sync in between), else the
    host's perf_counter."""

    def __init__(self, device):
        self.cuda = device == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        if self.cuda:
            torch.cuda.synchronize()
            return a.elapsed_time(b)
        return (b - a) * 1e3


def rel_err(a, b):
    """||a - b|| / ||b|| in fp64, the check's measure for losses and gradients alike."""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def measure(device, fwd, bwd, warmup, reps):
    """(fwd, bwd, step) times in ms and the absolute peak GiB of one step (None on a CPU)."""
    clock = Clock(device)
    for _ in range(warmup):
        bwd(fwd())
    peak = None
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        bwd(fwd())
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**30
    f, b, s = [], [], []
    for _ in range(reps):
        t0 = clock.mark()
        out = fwd()
        t1 = clock.mark()
        bwd(out)
        t2 = clock.mark()
        f.append(clock.ms(t0, t1))
        b.append(clock.ms(t1, t2))
        s.append(clock.ms(t0, t2))
        del out
    return f, b, s, peak


# ---------------------------------------------------------------------------------------------
# the ops: inputs, implementations, fp32 references
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One shape of one op: make(rows) builds fresh inputs; impls maps a name to loss(inputs);
    leaves(inputs) are what gradients are taken for; reference(inputs) is the fp32 truth."""

    op: str
    shape: str
    rows: int
    make: object
    leaves: object
    impls: dict
    reference: object


def _compiled(fn):
    return torch.compile(fn, dynamic=False)


def loss_cases(op, rows_list, vocabs, hidden, dtype, device, K, lk, use_compile):
    """The loss ops over the (rows, vocab) sweep."""
    for vocab in vocabs:
        for rows in rows_list:
            g = torch.Generator(device="cpu").manual_seed(rows * 7 + vocab)

            def rand(*shape, scale=1.0, grad=False):
                t = (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)
                return t.requires_grad_(grad)

            def randint(n, high):
                return torch.randint(0, high, (n,), generator=g).to(device)

            if op == "flce":

                def make(n, v=vocab):
                    return {
                        "x": rand(n, hidden, grad=True),
                        "w": rand(v, hidden, scale=hidden**-0.5, grad=True),
                        "y": randint(n, v),
                    }

                impls = {
                    "torch": lambda i: F.cross_entropy(F.linear(i["x"], i["w"]), i["y"]),
                    "ours": lambda i: K.fused_linear_cross_entropy(i["x"], i["w"], i["y"]),
                }
                if lk is not None:
                    lce = lk.LigerFusedLinearCrossEntropyLoss()
                    impls["liger"] = lambda i: lce(i["w"], i["x"], i["y"])
                leaves = lambda i: [i["x"], i["w"]]  # noqa: E731
                ref = lambda i: F.cross_entropy(F.linear(i["x"].double(), i["w"].double()), i["y"])  # noqa: E731
                shape = f"rows={rows} H={hidden} V={vocab}"
            elif op == "ce":

                def make(n, v=vocab):
                    return {"z": rand(n, v, scale=2.0, grad=True), "y": randint(n, v)}

                impls = {
                    "torch": lambda i: F.cross_entropy(i["z"], i["y"]),
                    "ours": lambda i: K.cross_entropy(i["z"], i["y"]),
                }
                if lk is not None:
                    lce_ = lk.LigerCrossEntropyLoss()
                    impls["liger"] = lambda i: lce_(i["z"], i["y"])
                leaves = lambda i: [i["z"]]  # noqa: E731
                ref = lambda i: F.cross_entropy(i["z"].double(), i["y"])  # noqa: E731
                shape = f"rows={rows} V={vocab}"
            elif op == "logprobs":

                def make(n, v=vocab):
                    return {"z": rand(n, v, scale=2.0, grad=True), "y": randint(n, v), "a": rand(n)}

                def eager(i, double=False):
                    z = i["z"].double() if double else i["z"]
                    return (torch.log_softmax(z, -1).gather(-1, i["y"][:, None]).squeeze(-1) * i["a"]).sum()

                impls = {"torch": eager, "ours": lambda i: (K.token_logprobs(i["z"], i["y"]) * i["a"]).sum()}
                leaves = lambda i: [i["z"]]  # noqa: E731
                ref = lambda i: eager(i, double=True)  # noqa: E731
                shape = f"rows={rows} V={vocab}"
            elif op == "kl":

                def make(n, v=vocab):
                    return {"s": rand(n, v, scale=2.0, grad=True), "t": rand(n, v, scale=2.0)}

                def eager(i, double=False):
                    s, t = (i["s"].double(), i["t"].double()) if double else (i["s"], i["t"])
                    return F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), reduction="batchmean", log_target=True)

                impls = {"torch": eager, "ours": lambda i: K.kl_div(i["s"], i["t"])}
                if lk is not None:
                    kl = lk.LigerKLDIVLoss(reduction="batchmean", log_target=True)
                    impls["liger"] = lambda i: kl(F.log_softmax(i["s"], -1), F.log_softmax(i["t"], -1))
                leaves = lambda i: [i["s"]]  # noqa: E731
                ref = lambda i: eager(i, double=True)  # noqa: E731
                shape = f"rows={rows} V={vocab}"
            else:
                raise ValueError(op)
            if use_compile:
                impls = {
                    "torch": impls["torch"],
                    "torch.compile": _compiled(impls["torch"]),
                    **{k: v for k, v in impls.items() if k != "torch"},
                }
            yield Case(op, shape, rows, make, leaves, impls, ref)


def _failed(row, e):
    row.status, row.note = "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def run_loss_case(case, dtype_name, device, check_rows, warmup, reps, tol):
    rows = {name: Row(case.op, case.shape, dtype_name, name, "ok") for name in case.impls}
    # 1. the check: each implementation on the first check_rows rows, against torch in fp64;
    #    everything it allocated is freed before timing, so that it is in no peak
    small = case.make(min(case.rows, check_rows))
    ref_loss = case.reference(small)
    ref_grads = torch.autograd.grad(ref_loss, case.leaves(small))
    for name, loss_fn in case.impls.items():
        row = rows[name]
        try:
            inputs = {k: (v.detach().clone().requires_grad_(v.requires_grad)) for k, v in small.items()}
            loss = loss_fn(inputs)
            grads = torch.autograd.grad(loss, case.leaves(inputs))
            row.check_rel_err = max([rel_err(loss, ref_loss)] + [rel_err(a, b) for a, b in zip(grads, ref_grads)])
            if not row.check_rel_err <= tol:
                row.status, row.note = "wrong", f"relative error {row.check_rel_err:.2e} > {tol:g}: not timed"
        except Exception as e:  # noqa: BLE001 - an OOM or a compile failure is a result, not a crash
            _failed(row, e)
        finally:
            inputs = loss = grads = None
    del small, ref_loss, ref_grads
    # 2. timing and peak memory at the full shape, for those that passed
    for name, loss_fn in case.impls.items():
        row = rows[name]
        if row.status != "ok":
            continue
        inputs = leaves = None
        try:
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                before = torch.cuda.memory_allocated()
            inputs = case.make(case.rows)
            if device == "cuda":
                row.inputs_gib = (torch.cuda.memory_allocated() - before) / 2**30
            leaves = case.leaves(inputs)
            f, b, s, peak = measure(
                device, lambda: loss_fn(inputs), lambda loss: torch.autograd.grad(loss, leaves), warmup, reps
            )
            row.fwd_ms, row.bwd_ms, row.step_ms, row.peak_gib = percentiles(f), percentiles(b), percentiles(s), peak
        except Exception as e:  # noqa: BLE001
            _failed(row, e)
        finally:
            inputs = leaves = None
            if device == "cuda":
                torch.cuda.empty_cache()
    return list(rows.values())


def adamw_rows(device, K, scale, layers, warmup, reps, use_compile, tol):
    """AdamW over the parameter shapes of a transformer (hidden 2048 x scale, MLP 5632 x scale)."""
    hdim, mlp, vocab = int(2048 * scale), int(5632 * scale), int(32000 * scale)
    shapes = [(vocab, hdim)] + ([(hdim, hdim)] * 4 + [(mlp, hdim), (mlp, hdim), (hdim, mlp)] + [(hdim,)] * 2) * layers
    g = torch.Generator(device="cpu").manual_seed(0)
    init = [torch.randn(s, generator=g) * 0.02 for s in shapes]
    grads = [torch.randn(s, generator=g) * 1e-3 for s in shapes]
    n = sum(p.numel() for p in init)
    shape = f"params={n / 1e6:.3g}M"
    kw = dict(lr=1e-3, weight_decay=0.1)
    makers = {"torch": lambda ps: torch.optim.AdamW(ps, foreach=True, **kw), "ours": lambda ps: K.FusedAdamW(ps, **kw)}
    if device == "cuda":
        makers["torch fused"] = lambda ps: torch.optim.AdamW(ps, fused=True, **kw)

    def params():
        ps = [torch.nn.Parameter(p.to(device)) for p in init]
        for p, gr in zip(ps, grads):
            p.grad = gr.to(device)
        return ps

    truth = params()
    truth_opt = torch.optim.AdamW(truth, foreach=False, **kw)
    for _ in range(3):
        truth_opt.step()
    truth = [p.detach().cpu() for p in truth]  # on the host: in no candidate's peak
    del truth_opt
    rows = []
    steppers = dict(makers)
    if use_compile:
        steppers["torch.compile"] = None
    for name in steppers:
        row = Row("adamw", shape, "fp32", name, "ok")
        rows.append(row)
        try:
            ps = params()
            opt = (makers["torch"] if name == "torch.compile" else makers[name])(ps)
            step = torch.compile(opt.step) if name == "torch.compile" else opt.step
            for _ in range(3):
                step()
            row.check_rel_err = max(rel_err(p.cpu(), q) for p, q in zip(ps, truth))
            if not row.check_rel_err <= tol:
                row.status, row.note = "wrong", f"relative error {row.check_rel_err:.2e} > {tol:g}: not timed"
                continue
            f, _, _, peak = measure(device, lambda: step(), lambda _: None, warmup, reps)
            row.step_ms, row.peak_gib = percentiles(f), peak
        except Exception as e:  # noqa: BLE001
            _failed(row, e)
        finally:
            ps = opt = step = None
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows


def newton_schulz_rows(device, K, shapes, dtype, dtype_name, warmup, reps, use_compile, tol):
    rows = []
    for shape in shapes:
        G = torch.randn(shape, generator=torch.Generator(device="cpu").manual_seed(1)).to(device=device, dtype=dtype)
        truth = K.newton_schulz_reference(G.float(), dtype=torch.float32)
        impls = {"torch": lambda G: K.newton_schulz_reference(G), "ours": lambda G: K.newton_schulz(G)}
        if use_compile:
            impls["torch.compile"] = _compiled(impls["torch"])
        for name, fn in impls.items():
            row = Row("newton_schulz", "x".join(map(str, shape)), dtype_name, name, "ok")
            rows.append(row)
            try:
                row.check_rel_err = rel_err(fn(G), truth)
                if not row.check_rel_err <= tol:
                    row.status, row.note = "wrong", f"relative error {row.check_rel_err:.2e} > {tol:g}: not timed"
                    continue
                f, _, _, peak = measure(device, lambda: fn(G), lambda _: None, warmup, reps)
                row.step_ms, row.peak_gib = percentiles(f), peak
            except Exception as e:  # noqa: BLE001
                _failed(row, e)
    return rows


# ---------------------------------------------------------------------------------------------
# tables and files
# ---------------------------------------------------------------------------------------------


def _fmt(ms):
    return "/".join(f"{t:.2f}" if t < 100 else f"{t:.0f}" for t in ms) if ms else "-"


def print_table(op, rows):
    print(f"\n{TITLES[op]}")
    print(
        f"  {'shape':<26}{'impl':<15}{'fwd ms p20/50/80':>22}{'bwd ms p20/50/80':>22}{'step ms p20/50/80':>22}"
        f"{'peak GiB':>10}{'inputs':>8}{'vs torch':>9}  check"
    )
    base = {r.shape: r for r in rows if r.impl == "torch" and r.step_ms}
    for r in rows:
        speed = "-"
        if r.step_ms and r.shape in base:
            speed = f"{base[r.shape].step_ms[1] / r.step_ms[1]:.2f}x"
        peak = f"{r.peak_gib:.2f}" if r.peak_gib is not None else "-"
        inputs = f"{r.inputs_gib:.2f}" if r.inputs_gib is not None else "-"
        check = f"{r.status} {r.check_rel_err:.1e}" if r.check_rel_err is not None else r.status
        print(
            f"  {r.shape:<26}{r.impl:<15}{_fmt(r.fwd_ms):>22}{_fmt(r.bwd_ms):>22}{_fmt(r.step_ms):>22}"
            f"{peak:>10}{inputs:>8}{speed:>9}  {check}{'  ' + r.note if r.note else ''}"
        )


CSV_FIELDS = [
    "op",
    "shape",
    "dtype",
    "impl",
    "status",
    "check_rel_err",
    "fwd_p20_ms",
    "fwd_p50_ms",
    "fwd_p80_ms",
    "bwd_p20_ms",
    "bwd_p50_ms",
    "bwd_p80_ms",
    "step_p20_ms",
    "step_p50_ms",
    "step_p80_ms",
    "peak_gib",
    "inputs_gib",
    "note",
]


def write(out_dir, env, rows):
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "kernels.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            d = {
                k: getattr(r, k)
                for k in ("op", "shape", "dtype", "impl", "status", "check_rel_err", "peak_gib", "inputs_gib", "note")
            }
            for part in ("fwd", "bwd", "step"):
                for q, v in zip(("p20", "p50", "p80"), getattr(r, f"{part}_ms") or [None] * 3):
                    d[f"{part}_{q}_ms"] = v
            w.writerow(d)
    (out_dir / "kernels.json").write_text(json.dumps({"environment": env, "rows": [asdict(r) for r in rows]}, indent=1))
    print(f"\nwrote {out_dir / 'kernels.csv'} and {out_dir / 'kernels.json'}")


def _ints(s):
    return [int(x) for x in s.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    p.add_argument("--rows", type=_ints, default=[4096, 8192, 16384, 32768], help="token counts (rows) to sweep")
    p.add_argument("--vocab", type=_ints, default=[32000, 50257, 128256, 151936], help="vocabularies to sweep")
    p.add_argument("--hidden", type=int, default=4096, help="hidden size of the fused linear CE")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--check-rows", type=int, default=2048, help="rows of the correctness check before timing")
    p.add_argument("--no-compile", action="store_true", help="leave out torch.compile (its compile time is long)")
    p.add_argument("--quick", action="store_true", help="reduced sweep: rows 4096,16384, vocab 32000,151936, 10 reps")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    ops = [o for o in a.ops.split(",") if o]
    unknown = set(ops) - set(OPS)
    if unknown:
        p.error(f"unknown ops {sorted(unknown)}; known: {','.join(OPS)}")
    if a.quick:
        a.rows, a.vocab, a.reps = [4096, 16384], [32000, 151936], min(a.reps, 10)
    out_dir = a.out or Path(
        os.environ.get("OUT") or ROOT / "outputs" / "benchmarks" / "kernels" / time.strftime("%Y%m%d-%H%M%S")
    )

    K = load_kernels()
    dtype = DTYPES[a.dtype]
    if torch.cuda.is_available():
        device, use_compile, lk = "cuda", not a.no_compile, liger_module()
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 in the references and the checks
        rows_list, vocabs, hidden, ns_shapes, adamw_scale, adamw_layers = (
            a.rows,
            a.vocab,
            a.hidden,
            [(2048, 2048), (5632, 2048), (16, 2048, 2048)],
            1.0,
            8,
        )
        env = environment(device)
        print(
            f"GPU {env['gpu']}  driver {env['driver']}  CUDA {env['cuda']}  torch {env['torch']}  triton {env['triton']}  "
            f"liger {env['liger_kernel']}  commit {(env['git_commit'] or '?')[:12]}{' (kernels edited)' if env['kernels_dirty'] else ''}"
        )
    else:
        device, use_compile, lk = "cpu", False, None
        print(
            "no GPU (torch.cuda.is_available() is False): no benchmark here. A tiny CPU sanity pass of the same code "
            "follows (correctness checks; CPU wall times, which measure nothing of interest)."
        )
        if not K._dispatch.interpreting():
            print("note: TRITON_INTERPRET is not 1, so 'ours' runs the torch fallback on this CPU")
        rows_list, vocabs, hidden, ns_shapes, adamw_scale, adamw_layers = [64], [1000], 32, [(64, 96)], 1 / 64, 1
        a.reps, a.warmup = min(a.reps, 3), 1
        env = environment(device)
    # bf16 answers differ from an fp64 truth by ~1e-2 relative (eager's as much as ours)
    tol = {"bf16": 3e-2, "fp16": 5e-3, "fp32": 1e-4}[a.dtype]

    all_rows = []
    for op in ops:
        op_rows = []
        if op == "adamw":
            op_rows = adamw_rows(device, K, adamw_scale, adamw_layers, a.warmup, a.reps, use_compile, 1e-5)
        elif op == "newton_schulz":
            # the Newton-Schulz iteration amplifies rounding: bf16 is compared loosely
            op_rows = newton_schulz_rows(
                device,
                K,
                ns_shapes,
                dtype,
                a.dtype,
                a.warmup,
                a.reps,
                use_compile,
                max(tol, 0.1) if dtype != torch.float32 else 1e-3,
            )
        else:
            for case in loss_cases(op, rows_list, vocabs, hidden, dtype, device, K, lk, use_compile):
                if use_compile:
                    torch._dynamo.reset()  # a fresh compile per shape, never a silent fallback to eager
                op_rows += run_loss_case(case, a.dtype, device, a.check_rows, a.warmup, a.reps, tol)
        print_table(op, op_rows)
        all_rows += op_rows
    write(out_dir, env, all_rows)
    bad = [r for r in all_rows if r.status == "wrong" and r.impl == "ours"]
    if bad:
        print(f"ours failed the correctness check in {len(bad)} case(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
