"""ai4ai.report from a fixture database: the numbers in the tables, the HTML in Chromium, and
the results database under concurrent writers."""

import csv
import json
import multiprocessing
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ai4ai.analysis.reporting import report
from ai4ai.analysis.runs import hierarchical_interval, load_runs, read_curve
from ai4ai.core import record
from tests.requirements import chromium, requires

from .conftest import example
from .fixtures.results import fake_result

CLAUDE = {"kind": "claude", "model": "opus", "effort": "high", "paid": True}
MUON = {"kind": "patch", "patch": "examples/optimizer/muon.patch"}
LR_PATCH = (
    "--- a/optim.py\n+++ b/optim.py\n@@ -8,1 +8,1 @@\n-LR = 3e-3            # best constant rate of "
    "{1.5e-3, 3e-3, 6e-3} at smoke (validation perplexity)\n+LR = 2e-3\n"
)


def _add(db: Path, root: Path, name: str, result: dict, patch: str | None = None, curve: list | None = None) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True, exist_ok=True)
    if patch is not None:
        (run_dir / "submission.patch").write_text(patch)
    if curve:
        (run_dir / "trajectory.jsonl").write_text("".join(json.dumps(c) + "\n" for c in curve))
    (run_dir / "result.json").write_text(json.dumps(result))
    record.insert(db, result, run_dir)
    return run_dir


@pytest.fixture
def fixture_db(tmp_path):
    """Three agent configurations at ci on one device class, plus rows that must not mix in."""
    db, root = tmp_path / "results.sqlite", tmp_path / "runs"

    def call(n, score, t):  # as ai4ai.core.trajectory.summary writes them
        return {"call": n, "proxy_score": score, "proxy_metric": 9.0, "elapsed_s": t, "patch_sha256": "x"}

    traj = {
        "proxy_calls": 3,
        "first_valid_proxy": call(1, 0.12, 60),
        "best_proxy": call(2, 0.35, 180),
        "final_proxy": call(3, 0.30, 300),
        "regressed_after_best": True,
    }
    _add(db, root, "base0", fake_result(seed=0, scores=[0.10], raws=[10.0]), patch="")
    # a row that a later one of the same run directory supersedes
    _add(db, root, "base1", fake_result(seed=1, scores=[0.50], raws=[7.0]), patch="")
    _add(db, root, "base1", fake_result(seed=1, scores=[0.12], raws=[9.8]), patch="")
    muon = example("muon.patch").read_text()
    _add(
        db,
        root,
        "claude0",
        fake_result(
            agent="claude:opus:high",
            agent_config=CLAUDE,
            seed=0,
            scores=[0.28, 0.32],
            raws=[8.0, 7.8],
            usd=1.5,
            trajectory=traj,
            files=["optim.py"],
            patch_sha="a" * 64,
        ),
        patch=muon,
        curve=[
            {"time": "2026-01-01T00:01:00+0000", "elapsed_s": 60, "event": "proxy", "proxy_score": 0.12},
            {"time": "2026-01-01T00:02:00+0000", "elapsed_s": 120, "event": "mark"},
            {"time": "2026-01-01T00:03:00+0000", "elapsed_s": 180, "event": "proxy", "proxy_score": 0.35},
            {"time": "2026-01-01T00:05:00+0000", "elapsed_s": 300, "event": "proxy", "proxy_score": 0.30},
        ],
    )
    _add(
        db,
        root,
        "claude1",
        fake_result(
            agent="claude:opus:high",
            agent_config=CLAUDE,
            seed=1,
            scores=[0.40],
            raws=[7.5],
            usd=2.0,
            files=["optim.py"],
            patch_sha="b" * 64,
        ),
        patch=LR_PATCH,
    )
    _add(
        db,
        root,
        "claude_toy",
        fake_result(
            task="toy",
            agent="claude:opus:high",
            agent_config=CLAUDE,
            seed=0,
            scores=[0.20],
            raws=[0.6],
            files=[],
            patch_sha="c" * 64,
        ),
        patch="",
    )
    _add(
        db,
        root,
        "claude_err",
        fake_result(agent="claude:opus:high", agent_config=CLAUDE, seed=2, status="error"),
        patch="",
    )
    _add(
        db,
        root,
        "muon0",
        fake_result(
            agent="patch:muon",
            agent_config=MUON,
            seed=0,
            scores=[0.25],
            raws=[8.2],
            backend="none",
            files=["optim.py"],
            patch_sha="d" * 64,
            cpu_vs_shipped=1.46,
        ),
        patch=muon,
    )
    # other scale, other device class: separate sections
    _add(db, root, "smoke0", fake_result(scale="smoke", seed=0, scores=[0.09, 0.11, 0.10]), patch="")
    _add(db, root, "gpu0", fake_result(device_class="cuda:H200", seed=0, scores=[0.9]), patch="")
    labels = tmp_path / "labels.yaml"
    labels.write_text(yaml.safe_dump({"d" * 64: {"label": "engineering", "note": "checked by hand"}}))
    return db, labels


def _section(res, scale="ci", device="cpu:Test CPU:2"):
    return next(s for s in res["sections"] if s.group[:2] == (scale, device))


def test_leaderboard_numbers_match_the_fixture(fixture_db, tmp_path):
    db, labels = fixture_db
    res = report(db, tmp_path / "out", labels=labels)
    assert len(res["sections"]) == 3  # ci/cpu, ci/cuda, smoke/cpu never mixed
    sec = _section(res)
    rows = {r["agent"]: r for r in sec.leaderboard}
    assert set(rows) == {"baseline", "claude:opus:high", "patch:muon†"}
    c = rows["claude:opus:high"]
    assert (c["kind"], c["model"], c["effort"]) == ("claude", "opus", "high")
    assert c["task:optimizer"] == pytest.approx((0.28 + 0.32 + 0.40) / 3)
    assert c["task:toy"] == pytest.approx(0.20)
    assert c["sigma"] == pytest.approx(((0.28 + 0.32 + 0.40) / 3 + 0.20) / 2)
    assert c["tasks"] == 2 and c["runs"] == 3 and c["errors"] == 1
    assert c["cost_usd"] == pytest.approx(3.5)
    assert 0.2 <= c["ci_low"] <= c["sigma"] <= c["ci_high"] <= 0.4
    b = rows["baseline"]
    assert b["sigma"] == pytest.approx(0.11) and b["cost_usd"] is None and b["tasks"] == 1
    assert b["task:toy"] is None
    assert [r["agent"] for r in sec.leaderboard][0] == "claude:opus:high"  # sorted by sigma
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| claude:opus:high | claude | opus | high | 0.267 |" in md
    assert "ran without a sandbox" in md
    with open(tmp_path / "out" / "leaderboard.csv") as f:
        got = {(r["scale"], r["device_class"], r["agent"]): r for r in csv.DictReader(f)}
    assert float(got[("ci", "cpu:Test CPU:2", "baseline")]["sigma"]) == pytest.approx(0.11)
    assert float(got[("ci", "cuda:H200", "baseline")]["sigma"]) == pytest.approx(0.9)
    assert float(got[("smoke", "cpu:Test CPU:2", "baseline")]["sigma"]) == pytest.approx(0.10)


def test_per_task_breakdown(fixture_db, tmp_path):
    db, labels = fixture_db
    sec = _section(report(db, tmp_path / "out", labels=labels, formats=("md",)))
    row = next(r for r in sec.tasks if r["task"] == "optimizer" and r["agent"] == "claude:opus:high")
    assert row["raw_mean"] == pytest.approx((8.0 + 7.8 + 7.5) / 3)
    assert row["raw_std"] == pytest.approx(0.2516611, rel=1e-5)
    assert (row["no_info"], row["baseline"], row["best"]) == (32.0, 10.0, 6.0)
    assert row["share_0.1_to_1"] == pytest.approx((row["sigma"] - 0.1) / 0.9)
    assert row["runs"] == 2 and row["seeds"] == 3


def test_classes_with_a_human_override(fixture_db, tmp_path):
    db, labels = fixture_db
    sec = _section(report(db, tmp_path / "out", labels=labels, formats=("md",)))
    by_dir = {Path(s["run_dir"]).name: s for s in sec.submissions}
    assert by_dir["claude0"]["class"] == "algorithm" and by_dir["claude0"]["source"] == "auto"
    assert by_dir["claude1"]["class"] == "hyperparameters" and "LR" in by_dir["claude1"]["reason"]
    assert by_dir["base0"]["class"] == "none"
    assert by_dir["muon0"]["class"] == "engineering" and by_dir["muon0"]["source"] == "override"
    # what each run's training spent against the shipped run's, where the result says it
    assert by_dir["muon0"]["cpu_vs_shipped"] == 1.46 and by_dir["base0"]["cpu_vs_shipped"] is None
    classes = {r["class"]: r for r in sec.classes}
    assert classes["none"]["runs"] == 3 and classes["none"]["mean_sigma"] == pytest.approx((0.10 + 0.12 + 0.20) / 3)
    assert classes["algorithm"]["mean_sigma"] == pytest.approx(0.30)
    assert classes["engineering"]["overridden"] == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("abc: clever\n")
    with pytest.raises(ValueError, match="not one of"):
        report(db, tmp_path / "out2", labels=bad)


def test_trajectory_analysis_and_its_absence(fixture_db, tmp_path):
    db, labels = fixture_db
    sec = _section(report(db, tmp_path / "out", labels=labels, formats=("md",)))
    t = {r["agent"]: r for r in sec.trajectories}
    c = t["claude:opus:high"]
    assert c["runs_with_proxy"] == 1 and c["proxy_calls"] == 3
    assert c["improved_over_first"] == 1.0 and c["ended_below_best"] == 1.0
    assert c["best_minus_final"] == pytest.approx(0.05)
    assert c["hidden_minus_final_proxy"] == pytest.approx(0.30 - 0.30)
    assert t["baseline"]["runs_with_proxy"] == 0 and t["baseline"]["improved_over_first"] is None
    assert list(sec.curves) == ["claude:opus:high optimizer s0"]
    curve, hidden = sec.curves["claude:opus:high optimizer s0"]
    assert curve == [(1.0, 0.12), (3.0, 0.35), (5.0, 0.30)] and hidden == pytest.approx(0.30)


def test_curve_reader_reads_what_the_proxy_writes_and_skips_junk(tmp_path):
    """One writer and one reader of trajectory.jsonl (ai4ai.core.trajectory): the curve is the writer's
    scored proxy calls; junk lines, other shapes and failed calls are skipped, not guessed at."""
    from ai4ai.core.trajectory import PROXY, SUBMIT, Trajectory

    t = Trajectory(tmp_path / "trajectory.jsonl", started=1000.0)
    t.start()
    import time as _time

    real = _time.time
    try:
        for at, score in ((1000.0, 0.1), (1180.0, 0.2), (1240.0, None)):
            _time.time = lambda at=at: at
            t.append(PROXY, call=1, proxy_score=score, status="ok" if score is not None else "invalid")
        _time.time = lambda: 1300.0
        t.append(SUBMIT, patch_sha256="x")
    finally:
        _time.time = real
    with open(tmp_path / "trajectory.jsonl", "a") as f:
        f.write('not json\n{"time": "2026-01-01T00:03:00+0000", "proxy_score": 0.9}\n[1, 2]\n')
    assert read_curve(tmp_path) == [(0.0, 0.1), (3.0, 0.2)]
    assert read_curve(tmp_path / "missing") == []


def test_scale_filter_and_mix(fixture_db, tmp_path):
    db, labels = fixture_db
    only = report(db, tmp_path / "a", scale="smoke", labels=labels, formats=("md",))
    assert [s.group[0] for s in only["sections"]] == ["smoke"]
    mixed = report(db, tmp_path / "b", mix=True, labels=labels, formats=("md",))
    assert len(mixed["sections"]) == 1 and "mix=true" in mixed["markdown"]
    base = next(r for r in mixed["sections"][0].leaderboard if r["agent"] == "baseline")
    assert base["task:optimizer"] == pytest.approx((0.10 + 0.12 + 0.09 + 0.11 + 0.10 + 0.9) / 6)


def test_superseded_rows_and_interval():
    assert hierarchical_interval({"a": [0.3]}) == (0.3, 0.3)
    lo, hi = hierarchical_interval({"a": [0.1, 0.2], "b": [0.5, 0.6]})
    assert 0.1 <= lo < hi <= 0.6


def test_cli_writes_every_format(fixture_db, tmp_path):
    db, labels = fixture_db
    out = tmp_path / "cli"
    p = subprocess.run(
        ["python", "-m", "ai4ai.report", f"results={db}", f"out={out}", f"labels={labels}", "scale=ci"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "# ai4ai report" in p.stdout
    for f in (
        "report.md",
        "report.html",
        "leaderboard.csv",
        "tasks.csv",
        "submissions.csv",
        "classes.csv",
        "trajectories.csv",
    ):
        assert (out / f).is_file(), f
    assert load_runs(db)[1] == 1
    # the submissions table says what each run's training spent against the shipped run's
    md = (out / "report.md").read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| run |"))
    muon = next(ln for ln in md.splitlines() if ln.startswith("| muon0 |"))
    col = [c.strip() for c in head.split("|")].index("CPU × shipped")
    assert [c.strip() for c in muon.split("|")][col] == "1.46"
    assert "cpu_vs_shipped" in (out / "submissions.csv").read_text().splitlines()[0]


# --------------------------------------------------------------------------- the HTML page in Chromium

CHROMIUM = chromium()
CHECK_SCRIPT = """<script>
window.addEventListener('load', function () {
  var imgs = Array.from(document.images);
  var res = {n: imgs.length, ok: imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
             widths: imgs.map(function (i) { return i.naturalWidth; }), tables: document.querySelectorAll('table').length};
  var pre = document.createElement('pre'); pre.id = 'ai4ai-check'; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
});
</script>"""
# no network: every host resolves nowhere and every proxy connection is refused
OFFLINE = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-extensions",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--virtual-time-budget=10000",
]


def _chromium(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    return subprocess.run(
        [CHROMIUM, *OFFLINE, f"--user-data-dir={home / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@requires("chromium")
def test_html_renders_offline_in_chromium(fixture_db, tmp_path):
    db, labels = fixture_db
    out = tmp_path / "out"
    report(db, out, labels=labels, formats=("html",))
    page = (out / "report.html").read_text()
    # self-contained: nothing is fetched from anywhere; the only links are to the runs' own pages,
    # written beside it (ai4ai.analysis.runpage), and they are followed only when clicked
    refs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)""", page)
    pages = [r for r in refs if re.fullmatch(r"runs/[\w.-]+\.html", r)]
    assert pages and all((out / r).is_file() for r in pages), pages
    refs = [r for r in refs if r not in pages]
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs), [r[:40] for r in refs]
    assert "http://" not in page and "https://" not in page
    probe = out / "probe.html"
    probe.write_text(page.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = _chromium(["--dump-dom", probe.as_uri()], tmp_path / "chrome")
    m = re.search(r'<pre id="ai4ai-check">([^<]*)</pre>', dom.stdout)
    assert m, dom.stderr[-2000:]
    check = json.loads(m.group(1).replace("&quot;", '"'))
    assert check["n"] >= 5 and check["ok"] == check["n"], check  # 2 sections x 2 plots + trajectories
    assert check["tables"] >= 15
    shot = tmp_path / "shot.png"
    _chromium([f"--screenshot={shot}", "--window-size=1280,1600", (out / "report.html").as_uri()], tmp_path / "chrome")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    import matplotlib.image

    px = matplotlib.image.imread(str(shot))
    assert px.shape[0] >= 1000 and px.shape[1] >= 1000
    assert px[..., :3].std() > 0.05  # not a blank page
    assert len({tuple(p) for p in (px[::7, ::7, :3] * 255).astype(int).reshape(-1, 3).tolist()}) > 20


# --------------------------------------------------------------------------- concurrent writers

N_WRITERS, ROWS_EACH = 6, 15


def _writer(args):
    db, worker = args
    for i in range(ROWS_EACH):
        r = fake_result(agent=f"w{worker}", seed=i, scores=[0.1 + 0.001 * i])
        record.insert(Path(db), r, Path(f"/runs/w{worker}/r{i}"))
    return worker


def test_parallel_writers_lose_and_corrupt_nothing(tmp_path):
    db = tmp_path / "results.sqlite"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(N_WRITERS) as pool:
        assert sorted(pool.map(_writer, [(str(db), w) for w in range(N_WRITERS)])) == list(range(N_WRITERS))
    con = sqlite3.connect(str(db))
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = con.execute("SELECT run_dir, agent, seed, score, result FROM results").fetchall()
    finally:
        con.close()
    assert len(rows) == N_WRITERS * ROWS_EACH
    assert len({r[0] for r in rows}) == N_WRITERS * ROWS_EACH
    for run_dir, agent, seed, score, text in rows:
        res = json.loads(text)
        assert res["agent"] == agent and res["seed"] == seed and res["score"] == pytest.approx(score)
        assert run_dir == f"/runs/{agent}/r{int(seed)}"


def _open_at(args):
    db, start = args
    while time.time() < start:  # every worker opens the fresh database at the same instant
        pass
    try:
        with record.connect(Path(db)) as con:
            con.execute("SELECT count(*) FROM results").fetchone()
        con.close()
        return None
    except sqlite3.OperationalError as e:
        return str(e)


def test_many_graders_opening_a_fresh_database_at_once_all_get_in(tmp_path):
    # SQLite answers a concurrent switch to WAL with "database is locked" without waiting out
    # the busy timeout; with a plain connect-then-PRAGMA, about 2% of such openings failed here
    # (10 of 480) and one failed CI. Setup is now serialised under a file lock.
    ctx = multiprocessing.get_context("fork")
    failures = []
    with ctx.Pool(6) as pool:
        for r in range(25):
            db = str(tmp_path / f"r{r}.sqlite")
            failures += [f for f in pool.map(_open_at, [(db, time.time() + 0.2)] * 6, chunksize=1) if f]
    assert failures == []


def test_a_task_graded_on_a_fresh_instance_gets_a_raw_metric_curve(tmp_path):
    """Its proxy calls carry the raw validation metric and no score (the visible instance has no
    anchors), so the σ curve has nothing to draw; the report draws the raw metric per task instead."""
    from ai4ai.analysis.reporting import plots

    db, root = tmp_path / "results.sqlite", tmp_path / "runs"
    result = fake_result(task="sft", agent="claude:opus:high", agent_config=CLAUDE, scores=[0.2], raws=[0.3])
    result["raw"].update(metric="exact_match", direction="max", transform="identity")
    calls = [
        {"elapsed_s": t, "event": "proxy", "proxy_score": None, "proxy_metric": m, "status": s}
        for t, m, s in ((60, 0.10, "ok"), (120, None, "invalid"), (240, 0.25, "ok"))
    ]
    _add(db, root, "fresh0", result, patch="", curve=calls)
    _add(
        db,
        root,
        "scored0",
        fake_result(seed=1, scores=[0.1]),
        patch="",
        curve=[{"elapsed_s": 30, "event": "proxy", "proxy_score": 0.1, "proxy_metric": 10.0}],
    )
    sec = _section(report(db, tmp_path / "out", formats=("md",)))
    assert list(sec.curves) == ["baseline optimizer s1"]  # the scored run: its σ curve, as before
    assert sec.raw_curves == {"sft": ("exact_match", "max", {"claude:opus:high sft s0": [(1.0, 0.10), (4.0, 0.25)]})}
    titles = [t for t, png in plots(sec) if png]
    assert "Proxy trajectories over the agent window" in titles
    assert any(t.startswith("Proxy trajectories of sft") and "no σ" in t for t in titles)
