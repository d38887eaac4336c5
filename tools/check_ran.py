"""Check from pytest's JUnit reports that the essential groups of tests ran, none of them skipped.

    python tools/check_ran.py REPORT.xml [REPORT.xml ...]

CI runs the suite with AI4AI_REQUIRE set, so a missing tool fails its tests instead of skipping
them; this check closes what that cannot see: a group deselected, renamed or emptied, or a skip
raised some other way. Each group is a prefix of the tests' node ids, all of its tests or only
its slow ones (tests/conftest.py marks those in the report); it must have run at least `least`
tests, with no skip among them but those whose message starts with one of ALLOWED_SKIPS (each
there for a reason given beside it). Exit 1 with one line per broken group.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

# (node-id prefix, slow tests only) -> the least number of tests that must have run in it: about
# what the suite holds today, so that a group emptied, renamed or deselected is seen
ESSENTIAL = {
    ("tests/redteam/", False): 250,  # every route probe and the boundaries' fuzzers
    ("tests/redteam/", True): 17,  # the graded attacks (CI's second call)
    ("tests/test_sandbox.py", False): 10,
    ("tests/test_cpu_accounting.py", False): 4,  # the cgroup's count, fuzzed over tree shapes
    ("tests/test_fuzz_patchwalk.py", False): 3,  # the patch reader and the walk, fuzzed
    ("tests/agents/", False): 10,  # the real Claude Code and Codex CLIs through the gateway
    ("tests/test_report.py::test_html_renders_offline_in_chromium", False): 1,
    ("tests/test_full_shrunk.py", True): 2,  # the `full` and the `quick` code paths, shrunk to CPU sizes
    ("tests/test_gpu_first_run.py", True): 1,  # the device script, end to end in its shrunk mode
    ("tests/tasks/test_reward_model.py", True): 1,  # end-to-end graded runs at ci
    ("tests/tasks/test_diffusion_rl.py", True): 1,
    ("tests/test_byo_model.py", True): 1,  # a graded run on a brought model, checked, and its audit
    ("tests/test_adapter.py", True): 5,  # LoRA adapters on a brought Llama, trained, merged and graded (5 tasks)
    ("tests/test_tuning.py", True): 1,  # a real two-point sweep, graded
}
# skips that are a branch of the test, not a missing tool: the other branch is tested beside them
ALLOWED_SKIPS = (
    "the host starved this run",  # test_load: the starved branch has its own test
    "filesystem refuses the name",  # test_patches: a name the filesystem refuses is not a route
)


@dataclass
class Tally:
    ran: int = 0
    skipped: list = field(default_factory=list)


def node_id(case: ET.Element) -> str:
    """pytest's node id of a JUnit testcase (classname "tests.redteam.test_x", name "test_y[p]")."""
    parts = case.get("classname", "").split(".")
    # a test class adds a part that is not a module: keep parts up to the last that names a file
    for i in range(len(parts), 0, -1):
        path = Path(*parts[:i]).with_suffix(".py")
        if path.exists():
            return "::".join([path.as_posix(), *parts[i:], case.get("name", "")])
    return "/".join(parts) + ".py::" + case.get("name", "")


def is_slow(case: ET.Element) -> bool:
    return any(p.get("name") == "slow" for p in case.iter("property"))


def tally(reports: list[Path]) -> dict[tuple[str, bool], Tally]:
    out = {group: Tally() for group in ESSENTIAL}
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            nid = node_id(case)
            for (prefix, slow_only), t in out.items():
                if not nid.startswith(prefix) or (slow_only and not is_slow(case)):
                    continue
                skip = case.find("skipped")
                # an expected failure ran (strict ones fail the run when they pass)
                if skip is None or skip.get("type") == "pytest.xfail":
                    t.ran += 1
                elif not skip.get("message", "").removeprefix("Skipped: ").startswith(ALLOWED_SKIPS):
                    t.skipped.append(f"{nid}: {skip.get('message', '')}")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    missing = [a for a in argv if not Path(a).is_file()]
    if missing:
        print(f"check_ran: no JUnit report at {', '.join(missing)} (pytest --junitxml=PATH writes one)")
        return 2
    bad = 0
    for group, t in tally([Path(a) for a in argv]).items():
        least = ESSENTIAL[group]
        prefix = group[0] + (" (slow)" if group[1] else "")
        if t.skipped:
            bad += 1
            print(f"check_ran: {prefix}: {len(t.skipped)} skipped (essential tests may not skip):")
            for line in t.skipped[:10]:
                print(f"  {line}")
        if t.ran < least:
            bad += 1
            print(f"check_ran: {prefix}: {t.ran} tests ran, at least {least} must")
        if not t.skipped and t.ran >= least:
            print(f"check_ran: {prefix}: {t.ran} ran, none skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
