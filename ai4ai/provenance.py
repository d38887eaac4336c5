"""What a number depends on: benchmark version, device class, library versions."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path

import yaml

from . import PROJECT_ROOT, __version__

# Calibration outputs live beside the hidden grader but are not part of what they measure.
UNVERSIONED = {"anchors.yaml", "anchors.lock", "anchors.tmp", "calibration"}


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
    for p in sorted((PROJECT_ROOT / "kernels").glob("*.py")):
        h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def benchmark_version() -> str:
    """Hash of repos_frozen/, grader_hidden/ (minus anchors), conf/task/ and the kernel modules."""
    h = hashlib.sha256()
    for name in ("repos_frozen", "grader_hidden", "conf/task"):
        h.update(name.encode() + tree_sha256(PROJECT_ROOT / name, UNVERSIONED).encode())
    h.update(b"kernels" + kernels_sha256().encode())
    return h.hexdigest()[:16]


# Task-config keys that cannot change a grading of the shipped algorithm: the prose, the patch
# filter's allowance basis (it decides which submissions are accepted, not what the anchors measure)
# and the tuning sweep (patches check_task grades beside the shipped recipe).
UNMEASURED_KEYS = ("description", "tuning")
UNMEASURED_SCALE_KEYS = ("n_params",)


def task_config_sha256(path: Path) -> str:
    """The task config as parsed (comments and unmeasured keys aside), canonically serialised."""
    cfg = yaml.safe_load(Path(path).read_text()) or {}
    for k in UNMEASURED_KEYS:
        cfg.pop(k, None)
    for b in (cfg.get("scales") or {}).values():
        for k in UNMEASURED_SCALE_KEYS:
            (b or {}).pop(k, None)
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()


def _mentions(root: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in Path(root).rglob("*.py") if p.is_file())


def task_version(task) -> str:
    """Hash of what one task's anchors depend on: its repo, its hidden grader (minus anchors), its
    config (minus the keys above) and, only if its repo or grader imports them, the kernel modules.
    Anchors are keyed by it, so editing another task, a kernel the shipped algorithm does not use or
    a README does not invalidate them (the global benchmark version still stamps every result)."""
    h = hashlib.sha256()
    h.update(b"repo" + tree_sha256(task.repo).encode())
    h.update(b"grader" + tree_sha256(task.grader, UNVERSIONED).encode())
    h.update(b"config" + task_config_sha256(PROJECT_ROOT / "conf" / "task" / f"{task.name}.yaml").encode())
    if _mentions(task.repo, b"ai4ai_kernels") or _mentions(task.grader, b"ai4ai_kernels"):
        h.update(b"kernels" + kernels_sha256().encode())
    return h.hexdigest()[:16]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_class(device: str, threads: int) -> str:
    if device.startswith("cuda"):
        import torch
        return f"cuda:{torch.cuda.get_device_name(0)}"
    return f"cpu:{cpu_model()}:{threads}"


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
