"""The one context of a run: what is graded where, under which caps.

`RunContext` carries the task, scale, device and sandbox of a run, the key its anchors are stored
under, and, once anchors are known (`anchors.with_budget`), the caps and the run's secret. Every
phase (proxy call, grading, calibration, check, audit) takes one; a phase that needs another run
folder or other caps gets a `replace`d copy, never a repacked type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ai4ai.core.console import say
from ai4ai.core.provenance import benchmark_version, default_device, device_class, task_version, torch_minor
from ai4ai.core.task import Task, TaskError, load_task, parse_task
from ai4ai.repo.models import with_model
from ai4ai.sandbox.box import resolve_backend

# said at the start of a run that found no working bubblewrap (sandbox=auto), not only in its result
UNSANDBOXED = (
    "UNSANDBOXED: bubblewrap is missing or cannot create namespaces here, so the agent and the training "
    "run as plain processes that can read this machine's files, the hidden grader included (results say "
    "sandbox.backend: none); fix: sudo apt-get install -y bubblewrap, or pass sandbox=none to silence this"
)

# agent.network: none; api_only (no network, only the API gateway to agent.api_hosts, which the
# coding-agent CLIs set up in agents/cli.py); open (the host network)
NETWORK_MODES = ("none", "api_only", "open")


class UsageError(SystemExit):
    """A bad request from the user: printed as one clear line, exit status 2."""

    def __init__(self, msg: str):
        print(f"ai4ai: {msg}")
        super().__init__(2)


@dataclass(frozen=True)
class Key:
    """What an anchor record is stored under (anchors.yaml)."""

    task: str
    scale: str
    task_version: str
    device_class: str
    torch: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RunContext:
    task: Task
    scale: str
    device: str
    threads: int
    backend: str
    run_dir: Path
    key: Key | None = None  # None only where no anchors are read (a bare training in a test)
    version: str = ""  # benchmark version
    task_overridden: bool = False  # the composed task config differs from conf/task/<name>.yaml
    progress: bool = True
    cap_s: float | None = None  # wall clock: the budget at full, a wide liveness net when cpu_cap_s is set
    cpu_cap_s: float | None = None  # CPU seconds of the training tree (metered scales, once calibrated)
    host_speed: dict | None = None  # hostspeed.Speed.as_dict(): how cpu_cap_s was carried to this host
    # The run's secret: training seeds and sandbox folder names derive from it, so a training
    # process cannot tell a proxy call from a grading seed. None: the seeds pass unchanged
    # (calibration and check_task, which grade no submission).
    nonce: str | None = None


def anchor_key(task: Task, scale: str, device: str, threads: int) -> Key:
    return Key(
        task=task.name,
        scale=scale,
        task_version=task_version(task, scale),
        device_class=device_class(device, threads),
        torch=torch_minor(),
    )


def task_from_cfg(cfg: DictConfig) -> tuple[Task, bool]:
    """The task the config composes, and whether it differs from conf/task/<name>.yaml. With
    task.model_path, the task is pointed at its derived repo on that model (models.with_model),
    checked before anything starts: a bad path is one UsageError line."""
    try:
        composed = parse_task(OmegaConf.to_container(cfg.task, resolve=True), f"task={cfg.task.name}")
        on_disk = load_task(cfg.task.name)
        overridden = composed != on_disk
        composed = with_model(composed)
    except TaskError as e:
        raise UsageError(str(e))
    return composed, overridden


def resolve_scale(name: str, device: str, paid: bool) -> str:
    if name != "auto":
        return name
    if device.startswith("cuda"):
        if paid:
            raise UsageError("scale=auto on a GPU with a paid agent: ask for scale=full (or smoke) by name")
        return "full"
    return "smoke"


def context(cfg: DictConfig, run_dir: Path, paid: bool = False) -> RunContext:
    """The context a composed config asks for; a bad request is a UsageError."""
    task, overridden = task_from_cfg(cfg)
    device = default_device() if cfg.device == "auto" else str(cfg.device)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("device=cuda but torch sees no CUDA device; use device=cpu or device=auto")
    scale = resolve_scale(cfg.scale.name, device, paid)
    try:
        threads = task.scale(scale).threads
    except TaskError as e:
        raise UsageError(str(e))
    if device == "cpu":
        threads = min(threads, os.cpu_count() or threads)
    try:
        backend = resolve_backend(cfg.sandbox.backend)
    except Exception as e:
        raise UsageError(str(e))
    if backend == "none" and cfg.sandbox.backend == "auto":
        say(UNSANDBOXED)
    return RunContext(
        task=task,
        scale=scale,
        device=device,
        threads=threads,
        backend=backend,
        run_dir=run_dir,
        key=anchor_key(task, scale, device, threads),
        version=benchmark_version(),
        task_overridden=overridden,
        progress=bool(cfg.get("progress", True)),
    )
