"""The API gateway against the fake model API, without any CLI: key injection, usage and cost
from streamed and plain answers, a cut stream, retries, the spending cap, the call log."""

import http.client
import json
import socket
import threading

import pytest

from ai4ai.window.gateway import Gateway, Upstream
from ai4ai.window.usage import normalize_usage, price_for

KEY = "sk-test-REAL-KEY-held-by-the-gateway-77c1"
PRICES = {
    "default": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0},
    "gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}


class UnixHTTP(http.client.HTTPConnection):
    """What the sandbox's forwarder does, in one hop: HTTP over the gateway's unix socket."""

    def __init__(self, path):
        super().__init__("gateway", timeout=30)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def gateway(tmp_path, api, auth="x-api-key", **kw):
    gw = Gateway(
        socket_path=tmp_path / "api.sock",
        upstream=Upstream.parse(api.base),
        key=KEY,
        auth=auth,
        prices=PRICES,
        log_path=tmp_path / "api_calls.jsonl",
        backoff_s=0.1,
        **kw,
    )
    gw.start()
    return gw


def call(gw, path, body, headers):
    c = UnixHTTP(str(gw.socket_path))
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **headers})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


BASH = [{"name": "Bash", "input_schema": {"type": "object"}}]


def test_streamed_anthropic_calls_counted_key_injected(tmp_path, fake_api):
    api = fake_api("edit", KEY)
    gw = gateway(tmp_path, api)
    msgs = [{"role": "user", "content": "go"}]
    for _ in range(3):
        status, data = call(
            gw,
            "/v1/messages?beta=true",
            {"model": "claude-sonnet-4-5", "stream": True, "tools": BASH, "messages": msgs},
            {"x-api-key": "dummy", "Authorization": "Bearer dummy"},
        )
        assert status == 200 and b"message_stop" in data
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "ok"}]})
    gw.stop()
    assert api.bad_keys == 0 and len(api.reported) == 3  # the dummy never reached the API
    tot, usd = api.totals(PRICES)
    s = gw.summary()
    assert {k: s[k] for k in tot} == tot
    assert tot["input_tokens"] == 3 * 700 + 1000 + 1010 + 1020 and tot["output_tokens"] == 40 + 41 + 42
    assert s["usd"] == pytest.approx(usd, abs=1e-6) and s["calls"] == s["ok_calls"] == 3
    rows = [json.loads(x) for x in (tmp_path / "api_calls.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == [200] * 3 and all(r["stream"] and r["latency_s"] >= 0 for r in rows)
    assert rows[0]["model"] == "claude-sonnet-4-5" and rows[0]["usage"]["cache_write_tokens"] == 200
    assert KEY not in (tmp_path / "api_calls.jsonl").read_text()


def test_openai_plain_and_streamed_bearer_auth(tmp_path, fake_api):
    api = fake_api("edit", KEY)
    gw = gateway(tmp_path, api, auth="bearer")
    tools = [{"type": "function", "name": "exec_command"}]
    status, data = call(
        gw, "/v1/responses", {"model": "gpt-5-codex", "input": [], "tools": tools}, {"Authorization": "Bearer dummy"}
    )
    assert status == 200 and json.loads(data)["output"][0]["name"] == "exec_command"
    status, data = call(
        gw,
        "/v1/responses",
        {"model": "gpt-5-codex", "input": [], "stream": True, "tools": tools},
        {"Authorization": "Bearer dummy"},
    )
    assert status == 200 and b"response.completed" in data
    gw.stop()
    tot, usd = api.totals(PRICES)
    s = gw.summary()
    assert api.bad_keys == 0 and {k: s[k] for k in tot} == tot and s["reasoning_tokens"] == 40
    assert s["usd"] == pytest.approx(usd, abs=1e-6)
    assert price_for(PRICES, "gpt-5-codex")["input"] == 1.25  # priced by model prefix


def test_429_retried_with_retry_after_and_recorded(tmp_path, fake_api):
    api = fake_api("429", KEY)
    gw = gateway(tmp_path, api)
    status, _ = call(gw, "/v1/messages", {"model": "m", "stream": True, "tools": BASH, "messages": []}, {})
    gw.stop()
    assert status == 200 and [r.get("status") for r in api.requests] == [429, 200]
    row = json.loads((tmp_path / "api_calls.jsonl").read_text().splitlines()[0])
    assert row["retries"] == [{"status": 429, "wait_s": 1.0}] and gw.summary()["retries"] == 1


def test_cap_refuses_the_call_that_would_pass_it_and_trips(tmp_path, fake_api):
    api = fake_api("cap", KEY)
    tripped = threading.Event()
    gw = gateway(tmp_path, api, max_usd=1.3, on_cap=tripped.set)
    # 200 kB of prompt: the gateway's worst case for one call (its bytes as tokens at the dearest
    # prompt price, 3.75 for a cache write, plus max_tokens at 15.0) is ~0.78 USD
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "stream": True,
        "tools": BASH,
        "messages": [{"role": "user", "content": "x " * 100_000}],
    }
    statuses = [call(gw, "/v1/messages", body, {})[0] for _ in range(5)]
    gw.stop()
    # each capped-mode answer costs ~0.39 USD: after two, 0.78 spent + 0.78 reserved would pass 1.3,
    # so the third is refused, and every later one
    assert statuses == [200, 200, 403, 403, 403] and tripped.is_set()
    s = gw.summary()
    assert s["capped"] and s["refused"] == 3 and len(api.reported) == 2
    assert s["usd"] == pytest.approx(api.totals(PRICES)[1], abs=1e-6) and s["usd"] <= 1.3
    rows = [json.loads(x) for x in (tmp_path / "api_calls.jsonl").read_text().splitlines()]
    assert [r.get("refused") for r in rows] == [None, None, "max_usd", "max_usd", "max_usd"]
    assert rows[0]["reserved_usd"] == pytest.approx(0.78, abs=0.01) and rows[2]["worst_usd"] == rows[0]["reserved_usd"]


def _hang_up_after_message_start(tmp_path, then: bytes, stall_s: float, **kw):
    """An upstream that sends message_start; the agent's side hangs up as soon as it has seen it.
    The upstream then sends a ping (the gateway learns of the hang-up when it relays that), waits
    `stall_s`, sends `then` and closes. Returns (summary, call-log row)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    hung_up = threading.Event()

    def upstream():
        c, _ = srv.accept()
        req = b""
        while b"\r\n\r\n" not in req:  # the whole request, so closing sends no reset
            req += c.recv(65536)
        head, _, got = req.partition(b"\r\n\r\n")
        size = int(next(x.split(b":")[1] for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")))
        while len(got) < size:
            got += c.recv(65536)
        start = {
            "type": "message_start",
            "message": {
                "model": "claude-sonnet-4-5",
                "usage": {"input_tokens": 5000, "cache_read_input_tokens": 1000, "output_tokens": 1},
            },
        }
        c.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
        )
        hung_up.wait(10)
        try:
            c.sendall(b'event: ping\ndata: {"type": "ping"}\n\n')
        except OSError:
            pass
        threading.Event().wait(stall_s)
        try:
            c.sendall(then)
        except OSError:
            pass
        c.close()

    threading.Thread(target=upstream, daemon=True).start()

    class A:
        base = f"http://127.0.0.1:{srv.getsockname()[1]}"

    gw = gateway(tmp_path, A, **kw)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(gw.socket_path))
    body = json.dumps({"model": "claude-sonnet-4-5", "stream": True}).encode()
    s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while b"message_start" not in got:
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    s.close()
    hung_up.set()
    gw.stop()
    srv.close()
    rows = [json.loads(x) for x in (tmp_path / "api_calls.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    return gw.summary(), rows[0]


FINAL_DELTA = (
    b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, '
    b'"usage": {"output_tokens": 700}}\n\nevent: message_stop\ndata: {"type": "message_stop"}\n\n'
)


def test_answer_cut_by_the_agent_is_read_to_its_end_and_all_counted(tmp_path):
    """The window ends while an answer streams: the upstream bills all of it, and its output usage
    comes in the last events, which the agent never reads. The gateway reads them."""
    t, row = _hang_up_after_message_start(tmp_path, FINAL_DELTA, stall_s=0.5)
    assert t["input_tokens"] == 6000 and t["cached_input_tokens"] == 1000 and t["output_tokens"] == 700
    assert t["usd"] == pytest.approx((5000 * 3.0 + 1000 * 0.3 + 700 * 15.0) / 1e6)
    assert t["partial_calls"] == 0 and row["ended"] == "agent"


def test_answer_that_outlasts_the_drain_is_charged_its_worst_case_and_says_so(tmp_path):
    """Its final usage never came: what the upstream bills is unknown, so the call is charged the
    worst case reserved for it (the body's bytes as prompt, the default output cap of 32000)."""
    t, row = _hang_up_after_message_start(tmp_path, FINAL_DELTA, stall_s=3.0, hangup_drain_s=0.5)
    assert t["input_tokens"] == 6000 and t["cached_input_tokens"] == 1000 and t["output_tokens"] == 1
    body = len(json.dumps({"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 32000}))
    worst = ((body + 4096) * 3.75 + 32000 * 15.0) / 1e6
    assert t["usd"] == pytest.approx(worst, abs=1e-6) and row["reserved_usd"] == pytest.approx(worst, abs=1e-6)
    assert t["usd"] > (5000 * 3.0 + 1000 * 0.3 + 15.0) / 1e6  # more than it reported so far
    assert t["partial_calls"] == 1 and t["worst_case_calls"] == 1
    assert row["ended"] == "agent, drain cut" and row["charged"] == "worst case"


def test_unreachable_upstream_is_a_failure_not_a_call(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    class A:
        base = f"http://127.0.0.1:{port}"

    gw = gateway(tmp_path, A, max_retries=1)
    status, _ = call(gw, "/v1/messages", {"model": "m"}, {})
    gw.stop()
    assert status == 502 and gw.summary()["calls"] == 0 and gw.summary()["failures"] == 1


def test_usage_shapes():
    assert normalize_usage(
        {"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 2, "output_tokens": 3}
    ) == {
        "input_tokens": 17,
        "cached_input_tokens": 5,
        "cache_write_tokens": 2,
        "output_tokens": 3,
        "reasoning_tokens": 0,
    }
    assert (
        normalize_usage(
            {
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 3},
                "completion_tokens_details": {"reasoning_tokens": 1},
            }
        )["cached_input_tokens"]
        == 3
    )
    assert normalize_usage({"input_tokens": -5, "output_tokens": "x"})["input_tokens"] == 0
    assert Upstream.parse("https://api.openai.com/v1").path == "/v1"
    with pytest.raises(ValueError):
        Upstream.parse("ftp://x")
