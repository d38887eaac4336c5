"""Route: the proxy reply as a window onto hidden and harness code.

A reply carries the metric, its sigma, a reason from a fixed vocabulary, a short harness-written
detail and the tail of the submission's own training log; the full detail of a fault goes to
.harness/proxy_errors.log, outside the agent's reach.
"""

import json

from ai4ai.repo.submission import from_patch
from ai4ai.window.proxy import REASONS

from .conftest import ask_socket, needs_bwrap, proxy_server, train_py_patch
from .test_grader_faults import OVERFLOW, WRITE_AND_EXIT

GRADER_SOURCE = "return math.exp(float(_nll(model, split).mean()))"  # a line of the hidden grader


def _strings(x):
    if isinstance(x, dict):
        for k, v in x.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)
    elif isinstance(x, str):
        yield x


def _assert_clean(reply: dict):
    for text in _strings(reply):  # each string as the agent reads it (not JSON-escaped)
        for bad in ("grader_hidden", "Traceback", 'File "', GRADER_SOURCE, "ai4ai/", ".harness"):
            assert bad not in text, (bad, reply)
    assert reply["reason"] in REASONS, reply


def _patched_train_py(task, code: str) -> str:
    """train.py with `code` inserted, as the agent would have edited it in its workspace."""
    return from_patch(task, task.repo, train_py_patch(task, "order = torch.Generator", code)).files["train.py"]


@needs_bwrap
def test_grader_exception_reaches_the_agent_as_a_reason_only(tmp_path, task, pristine):
    """Probe: the agent's current code writes checkpoints whose weights make the hidden grader raise
    (math.exp overflows on the validation split), then asks for a proxy score over the real socket.
    Found open: the reply's `error` carried the worker's stderr: a traceback with the path and source
    lines of grader_hidden/optimizer/grader.py. Now: reason `invalid_checkpoint`, a short detail, the
    submission's own log tail; the traceback is only in .harness/proxy_errors.log."""
    code = WRITE_AND_EXIT.format(
        prepare=OVERFLOW + "\nprint('OWN LOG LINE', flush=True)", meta="'{\"tokens_seen\": 0}'"
    )
    srv, run_dir = proxy_server(tmp_path, task, pristine, _patched_train_py(task, code))
    path = srv.start() / "proxy.sock"
    try:
        reply = ask_socket(path, b'{"cmd": "score"}\n')
    finally:
        srv.stop()
    _assert_clean(reply)
    assert reply["ok"] is False and reply["reason"] == "invalid_checkpoint", reply
    assert "OverflowError" in reply["detail"] and "OWN LOG LINE" in reply["train_log_tail"]
    assert reply["proxy_metric"] is None and reply["proxy_score"] is None
    rec = [json.loads(x) for x in srv.trajectory_path.read_text().splitlines()][-1]
    assert rec["reason"] == "invalid_checkpoint" and rec["status"] == "invalid"


@needs_bwrap
def test_harness_fault_reply_names_no_hidden_or_harness_code(tmp_path, task, pristine, monkeypatch):
    """Probe: a harness fault during a proxy call (the evaluation worker failing, its message holding a
    traceback through the hidden grader, as run_worker's RuntimeError did).
    Found open: `_serve` replied `{"error": "RuntimeError: ..."}` with the whole message. Now: reason
    `harness_error`, a fixed detail; the traceback goes to .harness/proxy_errors.log."""
    import ai4ai.window.proxy as proxy_mod

    leak = (
        'evaluation worker failed (exit 1):\nTraceback (most recent call last):\n  File "'
        f'{task.grader}/grader.py", line 53, in evaluate\n    {GRADER_SOURCE}\nOverflowError: math range error'
    )

    def broken(*a, **k):
        raise RuntimeError(leak)

    monkeypatch.setattr(proxy_mod, "run_worker", broken)
    code = WRITE_AND_EXIT.format(prepare="", meta="'{}'")
    srv, run_dir = proxy_server(tmp_path, task, pristine, _patched_train_py(task, code))
    path = srv.start() / "proxy.sock"
    try:
        reply = ask_socket(path, b'{"cmd": "score"}\n')
        refused = ask_socket(path, b'{"cmd": "nope"}\n')
    finally:
        srv.stop()
    _assert_clean(reply)
    assert reply["ok"] is False and reply["reason"] == "harness_error", reply
    _assert_clean(refused)
    assert refused["reason"] == "bad_request"
    log = (run_dir / ".harness" / "proxy_errors.log").read_text()
    assert "Traceback" in log and GRADER_SOURCE in log
