"""Timing and peak-memory helpers shared by the bench_<op>.py scripts (GPU only).

Each candidate is a zero-argument callable doing one full step (forward and backward for a
loss). Speed is the median of CUDA-event timings after warm-up; peak memory is the most
allocated during one call beyond what was allocated before it. Ratios are against eager torch.
"""

import sys

import torch


def gpu_or_exit():
    """Print a note and exit 0 when there is no CUDA device."""
    if not torch.cuda.is_available():
        print("no GPU (torch.cuda.is_available() is False): nothing to benchmark")
        sys.exit(0)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")


def liger():
    """The liger_kernel.transformers module, or None with a note."""
    try:
        import liger_kernel.transformers as lk

        return lk
    except Exception as e:  # noqa: BLE001 - any failure means: not comparable here
        print(f"note: Liger-Kernel not importable ({type(e).__name__}); its column is omitted")
        return None


def compiled(fn):
    """torch.compile(fn), imported lazily (compiling happens on first call)."""
    return torch.compile(fn)


def measure(fn, warmup=3, reps=10):
    """(median ms, peak MiB above the baseline) of fn(), or None if it fails (e.g. OOM)."""
    try:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2], peak
    except Exception as e:  # noqa: BLE001 - report and keep benchmarking the others
        print(f"    failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        torch.cuda.empty_cache()
        return None


def report(title, candidates):
    """Measure each (name, fn) and print ms, MiB and the ratios to the eager-torch row."""
    print(f"\n{title}")
    print(f"  {'impl':<16}{'ms':>10}{'peak MiB':>12}{'speedup':>10}{'mem ratio':>11}")
    results = {name: measure(fn) for name, fn in candidates}
    base = results.get("torch")
    for name, r in results.items():
        if r is None:
            print(f"  {name:<16}{'failed':>10}")
            continue
        ms, mib = r
        speed = f"{base[0] / ms:.2f}x" if base else "-"
        mem = f"{mib / base[1]:.2f}" if base and base[1] > 0 else "-"
        print(f"  {name:<16}{ms:>10.3f}{mib:>12.1f}{speed:>10}{mem:>11}")
