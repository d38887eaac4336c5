"""python -m ai4ai.list: the tasks, agent configs and scales this checkout has."""

from __future__ import annotations

from ai4ai import PROJECT_ROOT
from ai4ai.agents import kinds
from ai4ai.core.provenance import benchmark_version, task_version
from ai4ai.core.task import TaskError, list_tasks, load_task
from ai4ai.grading import records
from ai4ai.repo import models as own_models
from ai4ai.repo import registry


def _comment(path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def own_model_lines(task, recs: list) -> list[str]:
    """One line per model brought to `task` (task.model_path, ai4ai.repo.models), with the anchors it has."""
    if task.name not in own_models.OWN_MODEL_TASKS:
        return []
    out = []
    for version, e in registry.registered(task).items():
        # records carry the version at their scale; an entry written before `task_versions` has only its own
        versions = {version, *(e.get("task_versions") or {}).values()}
        cal = sorted(
            {
                f"{r['key']['scale']}@{r['key']['device_class']}"
                for r in recs
                if r["key"].get("task_version") in versions
            }
        )
        out.append(
            f"  {'':16s} own model {e['architecture']} ({e['n_params']:,} params, vocab {e['vocab_size']:,}, "
            f"sha256 {str(e['model_sha256'])[:12]}) {e['path']}  anchors: {', '.join(cal) or 'none yet'}"
        )
    if not out:
        out.append(f"  {'':16s} own model: task.model_path=/path/to/hf-model (none brought yet)")
    return out


def main() -> None:
    version = benchmark_version()
    print(f"benchmark version {version}\n\nTASKS")
    for name in list_tasks():
        try:
            t = load_task(name)
        except TaskError as e:
            print(f"  {name:16s} BROKEN: {e}")
            continue
        recs = records.all_records(t.grader)  # the committed ones and this machine's
        cal = sorted(
            {
                f"{r['key']['scale']}@{r['key']['device_class']}"
                for r in recs
                if r["key"].get("task_version") == task_version(t, r["key"]["scale"])
            }
        )
        print(
            f"  {name:16s} {t.family:16s} metric {t.metric.name} ({t.metric.direction})  "
            f"scales {', '.join(t.scales)}  anchors: {', '.join(cal) or 'none for this task version'}"
        )
        for line in own_model_lines(t, recs):
            print(line)
    print("\nAGENTS (agent=NAME; kinds: " + ", ".join(kinds()) + ")")
    for p in sorted((PROJECT_ROOT / "conf" / "agent").glob("*.yaml")):
        print(f"  {p.stem:16s} {_comment(p)}")
    print("\nSCALES (scale=NAME)")
    for p in sorted((PROJECT_ROOT / "conf" / "scale").glob("*.yaml")):
        print(f"  {p.stem:16s} {_comment(p)}")
    print("\nSANDBOXES (sandbox=NAME)")
    for p in sorted((PROJECT_ROOT / "conf" / "sandbox").glob("*.yaml")):
        print(f"  {p.stem:16s} {_comment(p) or p.read_text().strip()}")


if __name__ == "__main__":
    main()
