"""Check from pytest's JUnit reports that the essential groups of tests ran, none of them skipped.

    python tools/check_ran.py REPORT.xml [REPORT.xml ...]

CI runs the suite with AI4AI_REQUIRE set, so a missing tool fails its tests instead of skipping
them; this check closes what that cannot see: a group deselected, renamed or emptied, or a skip
raised some other way. Each group is a prefix of the tests' node ids; it must have run at least
`least` tests, with no skip among them but those whose message starts with one of ALLOWED_SKIPS
(each there for a reason given beside it). Exit 1 with one line per broken group.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

# (node-id prefix, the least number of tests that must have run in it)
ESSENTIAL = {
    "tests/redteam/": 150,  # every route probe, the graded attacks among them (the second call)
    "tests/test_sandbox.py": 10,
    "tests/agents/": 7,  # the real Claude Code and Codex CLIs through the gateway
    "tests/test_report.py::test_html_renders_offline_in_chromium": 1,
    "tests/test_full_shrunk.py": 1,  # the `full` code path, shrunk to CPU sizes
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


def tally(reports: list[Path]) -> dict[str, Tally]:
    out = {prefix: Tally() for prefix in ESSENTIAL}
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            nid = node_id(case)
            for prefix, t in out.items():
                if not nid.startswith(prefix):
                    continue
                skip = case.find("skipped")
                if skip is None:
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
    for prefix, t in tally([Path(a) for a in argv]).items():
        least = ESSENTIAL[prefix]
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
