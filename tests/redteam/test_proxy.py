"""Route 8: the proxy channel, on the real ProxyServer (handle() and its unix socket)."""

import json
import threading

from ai4ai.window.proxy import MAX_CALLS

from .conftest import ask_socket, proxy_server


def test_malformed_and_hostile_requests(tmp_path, task, pristine):
    """Route 8: malformed requests (not JSON, not an object, unknown command, oversized), a request naming
    paths for the harness to read or write (`out`, `workspace`, `call` with `..`), and calls past the limit.
    Gains nothing: malformed requests get an error reply and no work; extra fields are ignored (the
    harness only ever snapshots its own workspace into its own .harness folder); past MAX_CALLS no
    training runs; nothing is written outside the run folder (the run's own secret is in .harness, as in
    every graded run)."""
    srv, run_dir = proxy_server(tmp_path, task, pristine, window_s=60)
    for req in (None, [], "score", {"cmd": "rm"}, {"cmd": ["score"]}, {"no": "cmd"}):
        r = srv.handle(req)
        assert r["ok"] is False and "cmd" in r["error"]
    srv.calls = MAX_CALLS
    r = srv.handle({"cmd": "score", "out": "/etc", "workspace": "/", "call": "../../x"})
    assert r == {"ok": False, "reason": "call_limit", "error": f"proxy call limit ({MAX_CALLS}) reached"}
    srv.trajectory_path.touch()
    r = srv.handle({"cmd": "submit", "workspace": str(task.grader), "patch": "../../pwned"})
    assert r["ok"] and r["files"] == []
    written = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    assert written == [".harness", ".harness/marked.patch", ".harness/nonce", "trajectory.jsonl"]
    assert not (tmp_path / "pwned").exists()


def test_flood_of_calls_over_the_socket(tmp_path, task, pristine):
    """Route 8: a flood of concurrent connections: garbage, oversized requests, half-sent requests, status.
    Gains nothing: the server answers each it accepts (one at a time; the rest are refused at connect), stays
    up, and counts no proxy call."""
    srv, run_dir = proxy_server(tmp_path, task, pristine, window_s=60)
    sock_dir = srv.start()
    path = sock_dir / "proxy.sock"
    replies, errors, refused = [], [], []

    def client(i):
        try:
            payload = [
                b"garbage\n",
                b"{" * 10000 + b"\n",
                json.dumps({"cmd": "status"}).encode() + b"\n",
                b"\xff\xfe\n",
            ][i % 4]
            replies.append(ask_socket(path, payload, timeout=20))
        except BlockingIOError:  # backlog full: the flood is refused at connect, the harness is untouched
            refused.append(i)
        except Exception as e:  # noqa: BLE001 - any other client failure is a finding
            errors.append(repr(e))

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(120)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors[:3]
        assert len(replies) + len(refused) == 120 and replies
        assert all(r.get("ok") is False or "seconds_left" in r for r in replies)
        assert ask_socket(path, b'{"cmd": "status"}\n', timeout=20)["proxy_calls"] == 0
    finally:
        srv.stop()
    assert not (run_dir / ".harness" / "proxy_errors.log").exists()
