"""What a number depends on: benchmark version, device class, library versions."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from ai4ai import PROJECT_ROOT, __version__
from ai4ai.core.hidden import COMMON, HIDDEN_DIR, uses_common

# Calibration outputs live beside the hidden grader but are not part of what they measure.
UNVERSIONED = {"anchors.yaml", "anchors.lock", "anchors.tmp", "calibration", "models.yaml", "models.lock", "models.tmp"}


def tree_sha256(root: Path, skip: set[str] = frozenset()) -> str:
    """Content hash of a folder: relative paths and bytes of every file, in sorted order."""
    h = hashlib.sha256()
    root = Path(root)
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part in skip or part == "__pycache__" for part in rel.parts) or p.suffix == ".pyc":
            continue
        if p.is_file() and not p.is_symlink():
            h.update(str(rel).encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def kernels_sha256() -> str:
    """The kernel modules (what a submission imports), not their README."""
    h = hashlib.sha256()
    for p in sorted((PROJECT_ROOT / "ai4ai_kernels").glob("*.py")):
        h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def benchmark_version() -> str:
    """Hash of repos_frozen/, grader_hidden/ (minus anchors), conf/task/ and the kernel modules."""
    h = hashlib.sha256()
    for name in ("repos_frozen", "grader_hidden", "conf/task"):
        h.update(name.encode() + tree_sha256(PROJECT_ROOT / name, UNVERSIONED).encode())
    h.update(b"kernels" + kernels_sha256().encode())
    return h.hexdigest()[:16]


# Task-config keys that cannot change a grading of the shipped algorithm: the prose, check_task's
# tuning sweep (points it grades, not the shipped recipe), the patch filter's allowance basis (it
# decides which submissions are accepted, not what the anchors measure) and a scale's GPU estimate
# and peak memory (what a dry run prints). model_path is measured apart: by the model's content
# (model_sha256), never by its folder's name.
UNMEASURED_KEYS = ("description", "tuning", "model_path", "adapter")  # a model and its adapter: in the derived repo
UNMEASURED_SCALE_KEYS = ("n_params", "estimate", "peak_gpu_gib")


def task_config_sha256(path: Path, scale: str | None = None) -> str:
    """The task config as parsed (comments and unmeasured keys aside), canonically serialised. With
    `scale`, only that scale's block of `scales:` counts: another scale's keys (full's wall-clock
    default, say) are read by no grading at this one, so editing them leaves its anchors standing."""
    cfg = yaml.safe_load(Path(path).read_text()) or {}
    for k in UNMEASURED_KEYS:
        cfg.pop(k, None)
    if scale is not None and isinstance(cfg.get("scales"), dict):
        cfg["scales"] = {scale: cfg["scales"].get(scale)}
    for b in (cfg.get("scales") or {}).values():
        for k in UNMEASURED_SCALE_KEYS:
            (b or {}).pop(k, None)
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()


def common_sha256() -> str:
    """The graders' shared library, grader_hidden/common/ (hidden.COMMON), as a tree hash."""
    root = PROJECT_ROOT / HIDDEN_DIR / COMMON
    if not (root / "__init__.py").is_file():
        raise FileNotFoundError(f"{root} is missing: a hidden grader imports the graders' shared library from it")
    return tree_sha256(root)


def _mentions(root: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in Path(root).rglob("*.py") if p.is_file())


def _repo_sha256(task, scale: str | None) -> str:
    """tree_sha256 of the repo; at a given scale, without the artifacts its prepare step builds for the
    other scales and their checksum lines, which `python -m ai4ai.prepare` adds to the repo (so
    preparing `full` leaves the ci, smoke and quick versions, and their anchors, as they were)."""
    art = getattr(task, "artifacts", None)
    built = (
        set()
        if scale is None or art is None
        else {Path(w) for w in art.all_files()} - {Path(w) for w in art.files(scale)}
    )
    if not built:
        return tree_sha256(task.repo)
    h = hashlib.sha256()
    root = Path(task.repo)
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if "__pycache__" in rel.parts or p.suffix == ".pyc" or not p.is_file() or p.is_symlink() or rel in built:
            continue
        data = p.read_bytes()
        if p.name == "SHA256SUMS" and any(b.parent == rel.parent for b in built):
            names = {b.name for b in built if b.parent == rel.parent}
            kept = [
                ln for ln in data.decode().splitlines(keepends=True) if ln.split()[-1:] and ln.split()[-1] not in names
            ]
            data = "".join(kept).encode()
        h.update(str(rel).encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def task_version(task, scale: str | None = None) -> str:
    """Hash of what one task's anchors at `scale` depend on: its repo (at ci and smoke, without the
    artifacts only `full` builds), its hidden grader (minus anchors), its config (minus the keys
    above, and minus the other scales' blocks when `scale` is given), only if its repo or grader
    imports them the kernel modules, only if its grader imports it (hidden.uses_common) the graders'
    shared library grader_hidden/common/, and a brought model's content. Anchors are keyed by it, so
    editing another task, a kernel the shipped algorithm does not use, a shared grader file that
    this task's grader does not import or a config key no grading reads does not invalidate them
    (the global benchmark version still stamps every result)."""
    h = hashlib.sha256()
    h.update(b"repo" + _repo_sha256(task, scale).encode())
    h.update(b"grader" + tree_sha256(task.grader, UNVERSIONED).encode())
    h.update(b"config" + task_config_sha256(PROJECT_ROOT / "conf" / "task" / f"{task.name}.yaml", scale).encode())
    if _mentions(task.repo, b"ai4ai_kernels") or _mentions(task.grader, b"ai4ai_kernels"):
        h.update(b"kernels" + kernels_sha256().encode())
    if uses_common(task.grader):
        h.update(b"common" + common_sha256().encode())
    if getattr(task, "model_path", None):  # bring your own model: its content, not its path
        h.update(b"model" + model_sha256(task.model_path).encode())
    return h.hexdigest()[:16]


def base_version(task, scale: str | None = None) -> str:
    """The version of `task` without a brought model (task.model_path): that of the task before
    models.with_model derived it (task.base_task), or, not derived, of the same task without the
    model. Without a model, task_version itself. A brought model's anchor records carry it: their own
    version folds in the model's content and derived repo, which the repo alone cannot recompute, and
    they are current exactly while this one is (records.store)."""
    if not getattr(task, "model_path", None):
        return task_version(task, scale)
    return task_version(replace(getattr(task, "base_task", None) or task, model_path=None), scale)


_MODEL_SHA: dict = {}


def model_sha256(path) -> str:
    """Content hash of a model folder (config, tokenizer, weights: every file, names and bytes), the
    key a brought model's anchors carry. Cached per process on the files' sizes and mtimes, since a
    real model's weights take a while to hash."""
    root = Path(path).resolve()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts)
    )
    stamp = (str(root), tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if stamp not in _MODEL_SHA:
        h = hashlib.sha256()
        for p in files:
            d = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 24), b""):
                    d.update(chunk)
            h.update(str(p.relative_to(root)).encode() + b"\0" + d.digest())
        _MODEL_SHA[stamp] = h.hexdigest()
    return _MODEL_SHA[stamp]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_capability() -> str:
    """The vector instruction set torch's CPU kernels use here (AVX512, AVX2, DEFAULT, ...; the
    environment variable ATEN_CPU_CAPABILITY lowers it). CPUs sold under one name differ in it (a VM's
    "AMD EPYC" ran AVX2 kernels on one day's host and AVX-512 on the next), and the kernels
    round differently: sft's smoke seed 1001 trains to exact match 0.5808 with AVX2 and 0.5649 with
    AVX-512, a seed std apart. So it is part of a CPU's device class."""
    import torch

    get = getattr(torch.backends.cpu, "get_cpu_capability", None)
    return get() if get is not None else "unknown"


def device_class(device: str, threads: int) -> str:
    """What anchors are keyed by: a GPU's name, or a CPU's model name, kernel instruction set and threads."""
    if device.startswith("cuda"):
        import torch

        return f"cuda:{torch.cuda.get_device_name(0)}"
    return f"cpu:{cpu_model()}:{cpu_capability()}:{threads}"


def torch_minor() -> str:
    import torch

    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def versions() -> dict:
    import torch

    out = {"ai4ai_version": __version__, "python": platform.python_version(), "torch": str(torch.__version__)}
    for mod in ("transformers", "numpy", "safetensors"):
        try:
            out[mod] = str(__import__(mod).__version__)
        except ImportError:
            out[mod] = None
    return out


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def python_executable() -> str:
    return os.environ.get("AI4AI_PYTHON", sys.executable)
