"""CI cannot pass by skipping: .ci/run stops where bubblewrap cannot make a namespace, and
tools/check_ran.py fails a JUnit report whose essential groups skipped or did not run. The reports
here are written by pytest itself, over a small suite laid out as the project's."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "tools"))
import check_ran  # noqa: E402


def test_ci_stops_with_a_reason_where_bwrap_cannot_make_a_namespace(tmp_path):
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", ".ci/run"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "bubblewrap cannot create namespaces here" in r.stderr
    assert "No permissions to create new namespace" in r.stderr  # bwrap's own words travel


def write_suite(root: Path, skip_sandbox: bool, run_slow: bool) -> Path:
    """A tiny suite with the project's layout and conftest marking, run by the real pytest; the
    JUnit report it writes."""
    (root / "tests" / "redteam").mkdir(parents=True)
    (root / "tests" / "conftest.py").write_text(  # the project's own hook (PYTHONPATH below)
        "from tests.requirements import mark_slow\n\n\n"
        "def pytest_collection_modifyitems(config, items):\n    mark_slow(items)\n"
    )
    skip = "pytest.skip('bubblewrap is not installed')" if skip_sandbox else "pass"
    (root / "tests" / "redteam" / "test_probe.py").write_text(
        "import pytest\n\n"
        f"def test_route():\n    {skip}\n\n"
        "@pytest.mark.slow\ndef test_graded_attack():\n    assert True\n\n"
        "@pytest.mark.xfail(strict=True, reason='open')\ndef test_open_route():\n    assert False\n"
    )
    (root / "tests" / "test_sandbox.py").write_text("def test_box():\n    assert True\n")
    xml = root / "report.xml"
    marker = [] if run_slow else ["-m", "not slow"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(root),
            "-c",
            "/dev/null",
            "-m",
            "slow or not slow",
            *marker,
            f"--junitxml={xml}",
            "tests",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert xml.exists(), r.stdout + r.stderr
    return xml


@pytest.mark.parametrize(
    ("skip_sandbox", "run_slow", "ok"), [(False, True, True), (True, True, False), (False, False, False)]
)
def test_check_ran_reads_pytests_own_report(tmp_path, monkeypatch, skip_sandbox, run_slow, ok):
    xml = write_suite(tmp_path, skip_sandbox, run_slow)
    monkeypatch.chdir(tmp_path)  # node ids are resolved against the checkout
    monkeypatch.setattr(
        check_ran,
        "ESSENTIAL",
        {("tests/redteam/", False): 1, ("tests/redteam/", True): 1, ("tests/test_sandbox.py", False): 1},
    )
    tallies = check_ran.tally([xml])
    assert tallies[("tests/redteam/", True)].ran == (1 if run_slow else 0)
    assert tallies[("tests/test_sandbox.py", False)].ran == 1
    assert bool(tallies[("tests/redteam/", False)].skipped) == skip_sandbox
    # the route (unless skipped), the expected failure, and the graded attack when slow ones ran
    assert tallies[("tests/redteam/", False)].ran == (0 if skip_sandbox else 1) + 1 + run_slow
    assert (check_ran.main([str(xml)]) == 0) == ok


def test_check_ran_refuses_a_missing_report(tmp_path, capsys):
    assert check_ran.main([str(tmp_path / "none.xml")]) == 2
    assert "no JUnit report" in capsys.readouterr().out


def test_an_allowed_skip_or_an_xfail_counts_and_a_skip_does_not(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sandbox.py").write_text("")
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase classname="tests.test_sandbox" name="test_a">'
        f'<skipped message="Skipped: {check_ran.ALLOWED_SKIPS[0]} (load)"/></testcase>'
        '<testcase classname="tests.test_sandbox" name="test_b"/>'
        '<testcase classname="tests.test_sandbox" name="test_c"><skipped type="pytest.xfail" message="open"/>'
        '</testcase><testcase classname="tests.test_sandbox" name="test_d">'
        '<skipped type="pytest.skip" message="Skipped: bubblewrap is not installed"/></testcase>'
        "</testsuite></testsuites>"
    )
    monkeypatch.chdir(tmp_path)
    t = check_ran.tally([xml])[("tests/test_sandbox.py", False)]
    assert t.ran == 2  # test_b, and test_c: an expected failure ran
    assert t.skipped == ["tests/test_sandbox.py::test_d: Skipped: bubblewrap is not installed"]
