"""The task contract: conf/task/<name>.yaml, validated into frozen dataclasses.

Tasks are discovered by file; there is no central list. Unknown keys are errors.

One file of over 500 lines: every block of a task's YAML and the check that refuses its unknown or
ill-typed keys sit together, so the contract a task author writes against is read in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from ai4ai import PROJECT_ROOT

TASK_DIR = PROJECT_ROOT / "conf" / "task"
SCALES = ("ci", "smoke", "quick", "full")
# The GPU tiers: the wall clock binds, the splits and prepared models are built by `ai4ai.prepare`
# (not committed). `quick` is what a researcher iterates on (a shipped seed in 1-2 minutes of one
# GPU); `full` is the benchmark proper. ci and smoke, the CPU tiers, cap CPU time (records.METERED_SCALES).
GPU_SCALES = ("quick", "full")
ADAPTERS = ("auto", "full", "lora")  # task.adapter: how a brought model (task.model_path) is fine-tuned


class TaskError(ValueError):
    """A task's files break the contract; the message says what to fix."""


@dataclass(frozen=True)
class ScaleBudget:
    window_s: float
    cap_factor: float
    cap_min_s: float
    default_cap_s: float
    grader_seeds: tuple[int, ...]
    calibration_seeds: tuple[int, ...]
    threads: int
    # Parameters of the model the task trains at this scale: the patch filter sizes its
    # information budget against it (tests/test_task.py rebuilds each model to keep it true).
    n_params: int
    # Expected peak GPU memory of one training run of the shipped algorithm (GiB); full only.
    peak_gpu_gib: float | None = None
    # What one seed of the shipped algorithm costs on the scale's device (see Estimate); full only.
    estimate: Estimate | None = None
    # The CPU cap's floor at ci and smoke, in CPU-s of the calibrating host (host speed scales it
    # like the rest of the cap): where the shipped run costs seconds, room for a published method
    # of the family that needs more (grading.anchors.budget). 0: none.
    cpu_min_s: float = 0.0


ESTIMATE_UNITS = ("tokens", "samples", "env_steps", "graphs", "examples")


@dataclass(frozen=True)
class Estimate:
    """One seed of the shipped algorithm on one GPU (H200 class), estimated before it was measured.

    minutes = steps x step_ms; `flops` is the model FLOPs (6 x params x tokens for one forward and
    backward per token, more for extra forward passes), and `basis` says which of the two bounds
    (compute at a stated MFU, or per-step dispatch in eager PyTorch) binds and why."""

    units: str  # what `amount` counts (ESTIMATE_UNITS)
    amount: int  # tokens, samples, environment steps, graphs or examples one run consumes
    steps: int  # optimizer steps (or updates, iterations) of the shipped run
    flops: float
    step_ms: float  # expected wall time of one step on the GPU
    minutes: float  # expected wall time of the whole run (steps x step_ms)
    basis: str
    # A step measured on a GPU since (the `measured:` sub-block: step_ms, and `how`: device, date,
    # method). The declared figures above stay what the repo's README states; planning (dry-run
    # minutes, GPU-hours, the calibration's expected length) uses the measurement where there is one.
    measured_step_ms: float | None = None
    measured_how: str | None = None

    @property
    def expected_minutes(self) -> float:
        """Minutes of one shipped seed: the measured step x steps where measured, else the estimate."""
        if self.measured_step_ms is None:
            return self.minutes
        return self.steps * self.measured_step_ms / 60_000


@dataclass(frozen=True)
class Metric:
    name: str
    direction: str  # max | min
    transform: str  # identity | neg_log
    best: str | float  # how 1.0 is obtained: a number, or a name the grader implements


@dataclass(frozen=True)
class Artifacts:
    """What the repo's own prepare step makes for a scale whose artifacts are not committed (full).

    `command` runs in the repo with {scale}, {device} and {data} filled in ({data}: the folder of the
    grader's `data_function(dest)` output when one is named, else of its materialized splits)."""

    command: str
    writes: tuple[str, ...]  # repo-relative files, each listed in the repo's SHA256SUMS ({scale} filled in)
    scales: tuple[str, ...]
    data_function: str | None = None

    def files(self, scale: str) -> tuple[str, ...]:
        """The files the prepare step writes at `scale` (none at a scale it does not build)."""
        return tuple(w.format(scale=scale) for w in self.writes) if scale in self.scales else ()

    def all_files(self) -> tuple[str, ...]:
        """What it writes at every scale it builds: files that are no part of another scale's version."""
        return tuple(dict.fromkeys(f for s in self.scales for f in self.files(s)))


METER_PINS = ("scale", "seed", "device")  # what a served class's constructor may take: the run's own


@dataclass(frozen=True)
class MeteredClass:
    construct: tuple[str, ...] | None  # constructor parameters (each pinned to the run's); None: only returned
    methods: dict[str, dict]  # name -> signature {args: {name: spec}, count: rule} (meter_wire's signatures)
    attributes: tuple[str, ...]
    len: bool = False
    unit: str | None = None  # what the budget counts (sequences, tokens, env_steps, ...); constructed classes
    budget: Any = "@budget"  # the budget: a count, or the attribute of the pristine object it is read from
    exhausted: str | None = None  # "module.Exception" the meter raises when a request passes the budget

    def wire(self) -> dict:
        d = {"methods": dict(self.methods), "attributes": list(self.attributes), "len": self.len}
        if self.construct is not None:
            d.update(construct=list(self.construct), unit=self.unit, budget=self.budget)
            if self.exhausted:
                d["exhausted"] = self.exhausted
        return d


@dataclass(frozen=True)
class Meter:
    """The budgeted resources a graded run gets from the meter server, outside its sandbox
    (ai4ai/sandbox/meter_wire.py). `held`: repo files (globs) the training copy lacks and the meter's
    copy has (splits, teacher weights, generators' data); `classes`: the protected classes the
    meter runs, by "module.Class", with what of each it serves; `values`: dataclasses that
    travel by value (e.g. a batch of levels)."""

    held: tuple[str, ...]
    classes: dict[str, MeteredClass]
    values: tuple[str, ...] = ()

    def wire(self) -> dict:
        return {"classes": {k: v.wire() for k, v in self.classes.items()}, "values": list(self.values)}


@dataclass(frozen=True)
class TuningSearch:
    """`tuning: {search: {KNOB: [values]}, points: N, seed: S}`: the knobs searched jointly. The grid is
    the product over knobs of their values and the shipped value (read from the source), less the
    shipped recipe; `points` of its combinations are graded, a sample drawn with `seed` (None: all)."""

    knobs: tuple  # (("[file.py:]CONSTANT", (value, ...)), ...) in the config's order
    points: int | None = None
    seed: int = 0
    # `patches: [tuning/<task>/NAME.patch, ...]`: changes of the recipe that no constant of the
    # source names (more passes over the served data, a larger batch with the same steps...), each
    # graded as one more point of the sweep; paths from the project's root
    patches: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    name: str
    family: str
    description: str
    repo: Path
    grader: Path
    editable_files: tuple[str, ...]
    editable_folder: str | None
    protected: tuple[str, ...]
    entry: str
    model: str
    checkpoint_metadata: tuple[str, ...]
    data_checksums: str | None
    validation_files: tuple[str, ...]
    prepare: str | None
    # files data.prepare writes ({scale} filled in), for plans and checks; `name/` a folder (a `datasets` split)
    prepare_writes: tuple[str, ...]
    data_env: str | None
    metric: Metric
    scales: dict[str, ScaleBudget]
    deterministic: bool = False  # the shipped algorithm ignores --seed (e.g. magnitude pruning)
    artifacts: Artifacts | None = None
    # data.grading: the grader function that writes the training split a *graded* run is served, a
    # fresh instance of the task's source (the agent's own runs keep the committed, visible one);
    # None: graded runs are served what the agent's are
    grading_data: str | None = None
    # data.grading_artifacts: files the repo's own prepare step (data.artifacts.command) makes ({scale}
    # filled in) that depend on the instance, e.g. a base model pretrained on its corpus. The harness
    # runs that step on the graded instance's files (preparing.graded_artifacts) and a graded run's
    # training copy holds what it made in their place, or, for a file the meter holds (a teacher), the
    # meter's copy of the repo (training.build_meter_copy); () where the prepared models do not depend on it
    grading_artifacts: tuple[str, ...] = ()
    # A Hugging Face causal LM folder that replaces the repo's prepared model (task.model_path=...;
    # ai4ai/repo/models.py). None: the repo's own model, exactly as without the option.
    model_path: str | None = None
    # With model_path: how the shipped recipe fine-tunes it (task.adapter=...): "full" (every weight),
    # "lora" (a LoRA adapter, peft; the repos that fine-tune, models.ADAPTER_TASKS) or "auto"
    # (models.resolve_adapter: lora for a model too large to fine-tune in full). Its effect is folded
    # into the derived repo (byom/adapter.json).
    adapter: str = "auto"
    # check_task tuning=true: points of a sweep of the shipped recipe, each a tuple of
    # ("[file.py:]CONSTANT", new value) pairs, or a TuningSearch of several knobs searched jointly
    # (ai4ai/analysis/tuning.py expands, builds and grades them); None: the config declares no sweep;
    # (): it declares that nothing is to be tuned
    tuning: tuple | TuningSearch | None = None
    # Budgets served from outside the training sandbox (None: the task meters nothing that way)
    meter: Meter | None = None
    # With model_path, once models.with_model has pointed the task at the repo derived for the model: the
    # task as it was before (its own repo, no model). Its version is the base version a brought model's
    # anchor records carry (provenance.base_version), by which they are judged current. None otherwise.
    base_task: Task | None = None

    def scale(self, name: str) -> ScaleBudget:
        if name not in self.scales:
            raise TaskError(f"task {self.name!r} has no scale {name!r}; it has {sorted(self.scales)}")
        return self.scales[name]

    def is_editable(self, rel: str) -> bool:
        if rel in self.editable_files:
            return True
        f = self.editable_folder
        return (
            bool(f)
            and rel.startswith(f.rstrip("/") + "/")
            and rel.endswith(".py")
            and "/" not in rel[len(f.rstrip("/")) + 1 :]
        )


def _take(d: dict, where: str, required: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(d, dict):
        raise TaskError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = set(d) - required - set(optional)
    if unknown:
        raise TaskError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(required | set(optional))}")
    missing = required - set(d)
    if missing:
        raise TaskError(f"{where}: missing keys {sorted(missing)}")
    return d


def _cpu_floor(raw: Any, scale: str, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 <= raw < 1e6:
        raise TaskError(f"{where}: a number of CPU-s from 0 to 1e6 (0: no floor), got {raw!r}")
    if raw and scale not in ("ci", "smoke"):
        raise TaskError(
            f"{where}: only ci and smoke cap CPU time; at {scale} the wall clock binds, and its floor is cap_min_s"
        )
    return float(raw)


def _estimate(raw: Any, where: str) -> Estimate | None:
    if raw is None:
        return None
    e = _take(raw, where, {f.name for f in fields(Estimate)} - {"measured_step_ms", "measured_how"}, {"measured"})
    measured = e.get("measured")
    if e["units"] not in ESTIMATE_UNITS:
        raise TaskError(f"{where}: units must be one of {ESTIMATE_UNITS}, got {e['units']!r}")
    est = Estimate(
        units=e["units"],
        amount=int(e["amount"]),
        steps=int(e["steps"]),
        flops=float(e["flops"]),
        step_ms=float(e["step_ms"]),
        minutes=float(e["minutes"]),
        basis=str(e["basis"]).strip(),
    )
    if min(est.amount, est.steps, est.flops, est.step_ms, est.minutes) <= 0:
        raise TaskError(f"{where}: amount, steps, flops, step_ms and minutes must be positive")
    implied = est.steps * est.step_ms / 60_000
    if not 0.8 * implied <= est.minutes <= 1.25 * implied + 2:  # + start-up (imports, CUDA, data)
        raise TaskError(f"{where}: minutes {est.minutes:g} disagrees with steps x step_ms = {implied:.1f} min")
    if measured is not None:
        m = _take(measured, f"{where}.measured", {"step_ms", "how"})
        if float(m["step_ms"]) <= 0:
            raise TaskError(f"{where}.measured: step_ms must be positive")
        est = replace(est, measured_step_ms=float(m["step_ms"]), measured_how=str(m["how"]).strip())
    return est


def list_tasks() -> list[str]:
    return sorted(p.stem for p in TASK_DIR.glob("*.yaml"))


def load_task(name: str) -> Task:
    path = TASK_DIR / f"{name}.yaml"
    if not path.exists():
        raise TaskError(f"no task {name!r}: {path} does not exist; tasks: {', '.join(list_tasks())}")
    raw = yaml.safe_load(path.read_text())
    return parse_task(raw, str(path))


def parse_task(raw: Any, where: str) -> Task:
    d = _take(
        raw,
        where,
        {"name", "family", "description", "repo", "grader", "editable", "entry", "model", "metric", "scales"},
        {"protected", "checkpoint_metadata", "data", "deterministic", "model_path", "adapter", "tuning", "meter"},
    )
    if not isinstance(d.get("deterministic", False), bool):
        raise TaskError(f"{where}: deterministic must be true or false, got {d['deterministic']!r}")
    ed = _take(d["editable"], f"{where}: editable", {"files"}, {"folder"})
    metric = _take(d["metric"], f"{where}: metric", {"name", "direction", "transform", "best"})
    if metric["direction"] not in ("max", "min"):
        raise TaskError(f"{where}: metric.direction must be max or min, got {metric['direction']!r}")
    if metric["transform"] not in ("identity", "neg_log"):
        raise TaskError(f"{where}: metric.transform must be identity or neg_log, got {metric['transform']!r}")
    if metric["transform"] == "neg_log" and metric["direction"] != "min":
        raise TaskError(f"{where}: transform neg_log is for a positive metric where lower is better (direction: min)")
    data = _take(
        d.get("data") or {},
        f"{where}: data",
        set(),
        {"checksums", "validation", "prepare", "env", "writes", "artifacts", "grading", "grading_artifacts"},
    )
    art = None
    if data.get("artifacts") is not None:
        a = _take(data["artifacts"], f"{where}: data.artifacts", {"command", "writes", "scales"}, {"data_function"})
        art = Artifacts(
            command=str(a["command"]),
            writes=tuple(str(w) for w in a["writes"]),
            scales=tuple(str(x) for x in a["scales"]),
            data_function=a.get("data_function"),
        )
        if set(art.scales) - set(SCALES):
            raise TaskError(f"{where}: data.artifacts.scales must be among {SCALES}")
    if data.get("grading") is not None and not (data.get("env") and d.get("meter")):
        raise TaskError(
            f"{where}: data.grading needs data.env (where the meter reads the graded instance's "
            "split) and a meter: block (which serves it)"
        )
    graded_arts = tuple(str(w) for w in data.get("grading_artifacts") or ())
    if graded_arts and (data.get("grading") is None or art is None or not data.get("checksums")):
        raise TaskError(
            f"{where}: data.grading_artifacts needs data.grading (the graded instance's files), "
            "data.artifacts (the prepare step that makes them) and data.checksums (where its inputs are listed)"
        )
    scales = {}
    for s, b in d["scales"].items():
        if s not in SCALES:
            raise TaskError(f"{where}: unknown scale {s!r}; scales are {SCALES}")
        optional = {"peak_gpu_gib", "estimate", "cpu_min_s"}
        b = _take(b, f"{where}: scales.{s}", {f.name for f in fields(ScaleBudget)} - optional, optional)
        scales[s] = ScaleBudget(
            window_s=float(b["window_s"]),
            cap_factor=float(b["cap_factor"]),
            cap_min_s=float(b["cap_min_s"]),
            default_cap_s=float(b["default_cap_s"]),
            grader_seeds=tuple(int(x) for x in b["grader_seeds"]),
            calibration_seeds=tuple(int(x) for x in b["calibration_seeds"]),
            threads=int(b["threads"]),
            n_params=int(b["n_params"]),
            peak_gpu_gib=None if b.get("peak_gpu_gib") is None else float(b["peak_gpu_gib"]),
            estimate=_estimate(b.get("estimate"), f"{where}: scales.{s}.estimate"),
            cpu_min_s=_cpu_floor(b.get("cpu_min_s", 0.0), s, f"{where}: scales.{s}.cpu_min_s"),
        )
        if len(scales[s].calibration_seeds) < 5:
            raise TaskError(f"{where}: scales.{s}.calibration_seeds needs at least 5 seeds")
        if set(scales[s].calibration_seeds) & set(scales[s].grader_seeds):
            raise TaskError(f"{where}: scales.{s}: calibration and grader seeds must be disjoint")
    model_path = d.get("model_path")
    if model_path is not None and (not isinstance(model_path, str) or not model_path.strip()):
        raise TaskError(f"{where}: model_path must be a folder path (a string) or null, got {model_path!r}")
    adapter = d.get("adapter", "auto")
    if adapter not in ADAPTERS:
        raise TaskError(
            f"{where}: adapter must be one of {', '.join(ADAPTERS)} (how a brought model is fine-tuned), got {adapter!r}"
        )
    if ":" not in d["model"]:
        raise TaskError(f"{where}: model must be 'module:function', got {d['model']!r}")
    return Task(
        name=d["name"],
        family=d["family"],
        description=str(d["description"]).strip(),
        repo=PROJECT_ROOT / d["repo"],
        grader=PROJECT_ROOT / d["grader"],
        editable_files=tuple(ed["files"]),
        editable_folder=ed.get("folder"),
        protected=tuple(d.get("protected") or ()),
        entry=d["entry"],
        model=d["model"],
        checkpoint_metadata=tuple(d.get("checkpoint_metadata") or ()),
        data_checksums=data.get("checksums"),
        validation_files=tuple(data.get("validation") or ()),
        prepare=data.get("prepare"),
        data_env=data.get("env"),
        prepare_writes=tuple(str(w) for w in data.get("writes") or ()),
        metric=Metric(**metric),
        scales=scales,
        deterministic=d.get("deterministic", False),
        artifacts=art,
        grading_data=data.get("grading"),
        grading_artifacts=graded_arts,
        model_path=model_path,
        adapter=adapter,
        tuning=parse_tuning(d.get("tuning"), where),
        meter=parse_meter(d.get("meter"), where),
    )


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_meter(raw: Any, where: str) -> Meter | None:
    """The `meter:` block: {held: [globs], classes: {"module.Class": {construct, methods,
    attributes, len}}, values: ["module.Class"]}."""
    if raw is None:
        return None
    m = _take(raw, f"{where}: meter", {"held", "classes"}, {"values"})
    held = m["held"]
    if not isinstance(held, list) or not all(
        isinstance(h, str) and h and not h.startswith("/") and ".." not in h for h in held
    ):
        raise TaskError(f"{where}: meter.held must be a list of repo-relative paths or globs")
    if not isinstance(m["classes"], dict) or not m["classes"]:
        raise TaskError(f"{where}: meter.classes must name at least one served class")
    classes = {}
    for name, c in m["classes"].items():
        w = f"{where}: meter.classes.{name}"
        if not isinstance(name, str) or not _DOTTED.match(name):
            raise TaskError(f"{w}: a served class is named 'module.Class'")
        c = _take(c or {}, w, {"methods", "attributes"}, {"construct", "len", "unit", "budget", "exhausted"})
        lists = {}
        for k in ("construct", "attributes"):
            v = c.get(k)
            if v is None and k == "construct":
                lists[k] = None
                continue
            if not isinstance(v, list) or not all(
                isinstance(x, str) and _NAME.match(x) and not x.startswith("_") for x in v
            ):
                raise TaskError(f"{w}: {k} must be a list of public names")
            lists[k] = tuple(v)
        if lists["construct"] is not None and set(lists["construct"]) - set(METER_PINS):
            raise TaskError(f"{w}: construct may take only the run's own {METER_PINS}, got {list(lists['construct'])}")
        if not isinstance(c.get("len", False), bool):
            raise TaskError(f"{w}: len must be true or false")
        owned = lists["construct"] is not None
        if owned and not (isinstance(c.get("unit"), str) and _NAME.match(c["unit"])):
            raise TaskError(f"{w}: unit must name what its budget counts (e.g. sequences)")
        if not owned and {"unit", "budget", "exhausted"} & set(c):
            raise TaskError(f"{w}: unit, budget and exhausted belong to a constructed class")
        budget = c.get("budget", "@budget")
        if not (type(budget) is int and budget >= 0) and not (isinstance(budget, str) and _BOUND.match(budget)):
            raise TaskError(f"{w}: budget must be a count or '@attribute', got {budget!r}")
        if c.get("exhausted") is not None and not (isinstance(c["exhausted"], str) and _DOTTED.match(c["exhausted"])):
            raise TaskError(f"{w}: exhausted must be 'module.Exception'")
        if not isinstance(c["methods"], dict) or not all(
            isinstance(x, str) and _NAME.match(x) and not x.startswith("_") for x in c["methods"]
        ):
            raise TaskError(f"{w}: methods must map public method names to their signatures")
        methods = {k: _parse_signature(v, f"{w}.methods.{k}", owned) for k, v in c["methods"].items()}
        classes[name] = MeteredClass(
            construct=lists["construct"],
            methods=methods,
            attributes=lists["attributes"],
            len=c.get("len", False),
            unit=c.get("unit"),
            budget=budget,
            exhausted=c.get("exhausted"),
        )
    if not any(c.construct is not None for c in classes.values()):
        raise TaskError(f"{where}: meter.classes: at least one class needs construct (what a run builds)")
    values = m.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) and _DOTTED.match(v) for v in values):
        raise TaskError(f"{where}: meter.values must be a list of 'module.Class' names")
    return Meter(held=tuple(held), classes=classes, values=tuple(values))


_BOUND = re.compile(
    r"^(@len|@[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*|=[A-Za-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*|\$remaining)$"
)
_WIRE_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


def _is_bound(b: Any) -> bool:
    return b is None or (type(b) is int) or (type(b) is float) or (isinstance(b, str) and bool(_BOUND.match(b)))


def _parse_arg(spec: Any, w: str, scope: list[str]) -> dict:
    """One argument's spec (meter_wire's signatures): int, bool, tensor or value, strictly."""
    if not isinstance(spec, dict):
        raise TaskError(f"{w}: an argument's spec is a mapping")
    kinds = [k for k in ("int", "bool", "tensor", "value") if k in spec]
    if len(kinds) != 1:
        raise TaskError(f"{w}: an argument is one of int, bool, tensor or value")
    kind = kinds[0]
    extra = {"default"} | {
        "int": set(),
        "bool": set(),
        "tensor": {"ndim", "shape", "rows", "rows_as", "range"},
        "value": {"fields"},
    }[kind]
    _take(spec, w, {kind}, extra)
    if kind == "int" and not (
        isinstance(spec["int"], list) and len(spec["int"]) == 2 and all(map(_is_bound, spec["int"]))
    ):
        raise TaskError(f"{w}: int takes [lo, hi] (bounds: numbers, None, '@attr', '=module.NAME')")
    if kind == "bool" and spec["bool"] is not True:
        raise TaskError(f"{w}: bool: true")
    if kind == "value":
        if not (isinstance(spec["value"], str) and _DOTTED.match(spec["value"])):
            raise TaskError(f"{w}: value names a 'module.Class'")
        fields_ = spec.get("fields") or {}
        if not isinstance(fields_, dict):
            raise TaskError(f"{w}: fields map a value's fields to their specs")
        seen: list[str] = []
        for k, f in fields_.items():
            _parse_arg(f, f"{w}.fields.{k}", seen)
            seen.append(k)
    if kind == "tensor":
        if not (isinstance(spec["tensor"], list) and spec["tensor"] and set(spec["tensor"]) <= set(_WIRE_DTYPES)):
            raise TaskError(f"{w}: tensor lists its dtypes, of {_WIRE_DTYPES}")
        if type(spec.get("ndim")) is not int or not 0 <= spec["ndim"] <= 8:
            raise TaskError(f"{w}: a tensor needs ndim, 0 to 8")
        shape = spec.get("shape")
        if shape is not None and (
            not isinstance(shape, list)
            or len(shape) != spec["ndim"]
            or not all(_is_bound(d) or (isinstance(d, list) and len(d) == 2 and all(map(_is_bound, d))) for d in shape)
        ):
            raise TaskError(f"{w}: shape has one entry a dimension: a size, None, or [lo, hi]")
        if not _is_bound(spec.get("rows")):
            raise TaskError(f"{w}: rows is a bound")
        if spec.get("rows_as") is not None and spec["rows_as"] not in scope:
            raise TaskError(f"{w}: rows_as names an earlier argument")
        r = spec.get("range")
        if r is not None and not (isinstance(r, list) and len(r) == 2 and all(map(_is_bound, r))):
            raise TaskError(f"{w}: range is [lo, hi)")
    return spec


def _parse_signature(raw: Any, w: str, owned: bool) -> dict:
    """A served method's signature: {args: {name: spec}, count: rule} (meter_wire's signatures)."""
    sig = _take(raw, w, {"args", "count"})
    args = sig["args"] or {}
    if not isinstance(args, dict) or not all(isinstance(k, str) and _NAME.match(k) for k in args):
        raise TaskError(f"{w}: args map argument names to specs, in order")
    seen: list[str] = []
    for k, spec in args.items():
        _parse_arg(spec, f"{w}.args.{k}", seen)
        seen.append(k)
    count = sig["count"]
    if count in ("free", "steps"):
        if count == "steps" and owned:
            raise TaskError(f"{w}: steps counts a returned batch of episodes against the class that reset it")
        return {"args": args, "count": count}
    if not owned:
        raise TaskError(f"{w}: a class that is only returned counts nothing of its own (free or steps)")
    if not isinstance(count, dict) or len({"rows", "tokens", "prepay", "claim"} & set(count)) != 1:
        raise TaskError(f"{w}: count is free, steps, or one of rows, tokens, prepay, claim")
    if "rows" in count:
        _take(count, w + ".count", {"rows"})
        names = [count["rows"]]
    elif "tokens" in count:
        _take(count, w + ".count", {"tokens"}, {"pad", "per_row", "reply"})
        names = count["tokens"] if isinstance(count["tokens"], list) and count["tokens"] else [None]
        if not _is_bound(count.get("per_row", 0)) or not (count.get("reply") is None or type(count["reply"]) is int):
            raise TaskError(f"{w}.count: per_row is a bound, reply the index of a reply's array")
    elif "prepay" in count:
        _take(count, w + ".count", {"prepay", "per"})
        names = [count["prepay"]]
        if not _is_bound(count["per"]):
            raise TaskError(f"{w}.count: per is a bound")
    else:
        _take(count, w + ".count", {"claim"})
        names = [count["claim"]]
    for n in names:
        if n not in args:
            raise TaskError(f"{w}.count: counts {n!r}, which is not one of its arguments")
    kinds = {"rows": "tensor", "tokens": "tensor", "prepay": "int", "claim": "value"}
    rule = next(k for k in kinds if k in count)
    if any(kinds[rule] not in args[n] or "default" in args[n] for n in names):
        raise TaskError(f"{w}.count: {rule} counts a required {kinds[rule]} argument")
    return {"args": args, "count": count}


_CONSTANT = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_./-]*\.py:)?[A-Za-z_][A-Za-z0-9_]*$")
_SCALAR = (bool, int, float, str)


MAX_GRID = 4096  # combinations a joint search may span
MAX_POINTS = 64  # points a sweep may grade (each is a graded run on every grader seed)


def _tuning_value(value: Any, at: str, name: str) -> Any:
    if isinstance(value, list) and value and all(isinstance(v, _SCALAR) for v in value):
        return tuple(value)
    if not isinstance(value, _SCALAR):
        raise TaskError(f"{at}: {name} = {value!r}: a value is a number, boolean, string or a non-empty list of those")
    return value


def _tuning_name(name: Any, at: str) -> str:
    if not isinstance(name, str) or not _CONSTANT.match(name):
        raise TaskError(f"{at}: {name!r} is not a constant's name (CONSTANT, or file.py:CONSTANT)")
    return name


def parse_search(raw: dict, where: str) -> TuningSearch:
    """`tuning: {search: {KNOB: [values, ...]}, points: N, seed: S, patches: [PATH, ...]}` (TuningSearch);
    `{patches: [PATH, ...]}` alone where the recipe has no constant to search."""
    at = f"{where}: tuning"
    unknown = sorted(str(k) for k in set(raw) - {"search", "points", "seed", "patches"})
    if unknown:
        raise TaskError(f"{at}: unknown key(s) {unknown}; a joint search has search, points, seed and patches")
    patches = parse_tuning_patches(raw.get("patches", []), f"{at}.patches")
    search = raw.get("search")
    if search is None and patches and not set(raw) & {"points", "seed"}:
        search = {}
    elif not isinstance(search, dict) or not search:
        raise TaskError(f"{at}.search: a non-empty mapping {{CONSTANT: [values]}} of the knobs searched jointly")
    knobs, size = [], 1
    for name, values in search.items():
        name = _tuning_name(name, f"{at}.search")
        if not isinstance(values, list) or not values:
            raise TaskError(f"{at}.search.{name}: a non-empty list of values, got {values!r}")
        vals = tuple(_tuning_value(v, f"{at}.search", name) for v in values)
        if len(set(vals)) != len(vals):
            raise TaskError(f"{at}.search.{name}: a value appears twice in {values!r}")
        knobs.append((name, vals))
        size *= len(vals) + 1  # the shipped value joins each knob's values
    if size > MAX_GRID:
        raise TaskError(f"{at}.search: up to {size:,} combinations, over {MAX_GRID:,}: fewer knobs or values")
    points = raw.get("points")
    if points is not None and (
        isinstance(points, bool) or not isinstance(points, int) or not 1 <= points <= MAX_POINTS
    ):
        raise TaskError(f"{at}.points: a whole number of points to grade, 1 to {MAX_POINTS}, got {points!r}")
    if points is None and size - 1 > MAX_POINTS:
        raise TaskError(f"{at}: the grid has up to {size - 1:,} points to grade: say points: N (at most {MAX_POINTS})")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TaskError(f"{at}.seed: a whole number (the sample's seed), got {seed!r}")
    if (size - 1 if points is None else min(size - 1, points)) + len(patches) > MAX_POINTS:
        raise TaskError(f"{at}: over {MAX_POINTS} points to grade with the {len(patches)} patch(es): fewer points")
    return TuningSearch(knobs=tuple(knobs), points=points, seed=seed, patches=patches)


def parse_tuning_patches(raw: Any, at: str) -> tuple[str, ...]:
    """`patches:` of a sweep: distinct paths of .patch files, relative to the project's root and
    inside it. That each exists is checked where the sweep is graded (tuning.declared_patches): a
    task loads to be run or graded from a copy of the project without the tuning/ folder."""
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise TaskError(f"{at}: a list of paths of .patch files from the project's root, got {raw!r}")
    root = PROJECT_ROOT.resolve()
    for rel in raw:
        path = (root / rel).resolve()
        if Path(rel).is_absolute() or not path.is_relative_to(root):
            raise TaskError(f"{at}: {rel!r} must be a path inside the project, from its root (tuning/...)")
        if path.suffix != ".patch":
            raise TaskError(f"{at}: {rel!r} does not name a .patch file (tuning/<task>/NAME.patch)")
    if len(set(raw)) != len(raw):
        raise TaskError(f"{at}: a patch appears twice in {raw!r}")
    return tuple(raw)


def parse_tuning(raw: Any, where: str) -> tuple | TuningSearch | None:
    """The `tuning:` block: a list of points, each a mapping {CONSTANT: value} of module-level
    constants of the entry script (or `file.py:CONSTANT` of another editable file); values are
    numbers, booleans, strings or lists of those (tuples in code). An empty list: nothing to tune.
    Or a joint search of several knobs: {search: {CONSTANT: [values]}, points: N, seed: S} (parse_search)."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        return parse_search(raw, where)
    if not isinstance(raw, list):
        raise TaskError(
            f"{where}: tuning must be a list of points, each a mapping {{CONSTANT: value}}, or a joint search "
            f"{{search: {{CONSTANT: [values]}}, points: N, seed: S}}; got {type(raw).__name__}"
        )
    points, seen = [], set()
    for i, pt in enumerate(raw):
        at = f"{where}: tuning[{i}]"
        if not isinstance(pt, dict) or not pt:
            raise TaskError(
                f"{at}: a point is a non-empty mapping {{CONSTANT: value}} of train.py's constants, got {pt!r}"
            )
        items = [(_tuning_name(name, at), _tuning_value(value, at, name)) for name, value in pt.items()]
        key = tuple(sorted(items, key=lambda kv: kv[0]))
        if key in seen:
            raise TaskError(f"{at}: the same point appears twice")
        seen.add(key)
        points.append(tuple(items))
    return tuple(points)
