"""`patch`: applies a given unified diff to the workspace (replays, published examples)."""

import time
from pathlib import Path

from ai4ai import PROJECT_ROOT
from ai4ai.agents.base import AgentContext, AgentOutcome
from ai4ai.repo.patches import PatchFormatError, parse_patch


def resolve(path: str) -> Path:
    p = Path(path)
    for cand in (p, PROJECT_ROOT / p):
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"agent.patch={path!r}: no such file (relative paths are tried from the current folder and from {PROJECT_ROOT})"
    )


def run(ctx: AgentContext) -> AgentOutcome:
    t0 = time.monotonic()
    path = resolve(ctx.config["patch"])
    log = [f"patch agent: applying {path}"]
    # Written file by file: a later section of the same file patches what an earlier one wrote.
    for section in parse_patch(path.read_text()):
        rel = section.path
        # Only plain relative paths are written; the submission filter judges them afterwards.
        if not rel or rel.startswith("/") or ".." in Path(rel).parts:
            log.append(f"  skipped {rel!r}: unsafe path")
            continue
        target = ctx.workspace / rel
        try:
            if section.new is None:
                target.unlink(missing_ok=True)
            else:
                # a modified file the workspace lacks is patched from empty, as if created
                base = target.read_text() if section.old is not None and target.is_file() else ""
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(section.apply(base))
            log.append(f"  applied {rel}")
        except (PatchFormatError, OSError) as e:
            log.append(f"  failed {rel}: {e}")
    ctx.log_path.write_text("\n".join(log) + "\n")
    return AgentOutcome(exit_code=0, timed_out=False, wall_s=time.monotonic() - t0)
