"""A property-based fuzzer of the API gateway (issue 39, part 6): random and malformed requests
(methods, paths, query strings, Content-Length and chunked framings, JSON bodies of odd shapes,
huge, negative or mistyped output caps, unknown models) sent raw over its unix socket, and random
answers from a scripted upstream (plain JSON or SSE, Anthropic or OpenAI usage, odd usage shapes,
streams cut before their final usage, error statuses). After every request:

- nothing outside the allow-list reached the upstream;
- the cost the gateway recorded grew by at least what the upstream reported for what it forwarded
  (priced from the same table: the answering model's prices, the highest for an unknown model);
- no reservation is left held and no call is left in flight;
- the gateway still answers;
and at the end the harness's memory has not grown beyond a bound.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai4ai.window.gateway import Gateway, Upstream

KEY = "sk-test-REAL-KEY-fuzz-7d1e"
PRICES = {
    "default": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "output": 5.0},
    "claude-haiku": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "output": 5.0},
    "claude-opus": {"input": 5.0, "cached_input": 0.5, "cache_write": 6.25, "output": 25.0},
    "gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}
ALLOWED = {("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens"), ("POST", "/v1/responses")}
MODELS = ["claude-haiku-4-5", "claude-opus-4-5", "gpt-5-codex", "mystery-9", "", "claude"]


def table_of(model) -> dict:
    """The spec, restated: the longest prefix's table, else each price at the table's highest."""
    names = [n for n in PRICES if n != "default" and isinstance(model, str) and model.startswith(n)]
    if names:
        t = PRICES[max(names, key=len)]
    else:
        t = {k: max(p.get(k, p["input"]) for p in PRICES.values()) for k in ("input", "cached_input", "cache_write")}
        t["output"] = max(p["output"] for p in PRICES.values())
    return {**t, "cache_write": t.get("cache_write", t["input"])}


def n(usage, key) -> int:
    v = usage.get(key) if isinstance(usage, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def billed(api: str, model, usage) -> float:
    """What the upstream says this answer costs, from its integer usage fields."""
    t = table_of(model)
    if api == "anthropic":
        usd = n(usage, "input_tokens") * t["input"] + n(usage, "cache_creation_input_tokens") * t["cache_write"]
        usd += n(usage, "cache_read_input_tokens") * t["cached_input"]
    else:
        cached = min(
            n(usage.get("input_tokens_details") if isinstance(usage, dict) else None, "cached_tokens"),
            n(usage, "input_tokens"),
        )
        usd = (n(usage, "input_tokens") - cached) * t["input"] + cached * t["cached_input"]
    return (usd + n(usage, "output_tokens") * t["output"]) / 1e6


class Upstream_:
    """The scripted upstream: answers the next request as `script` says, records what it saw."""

    def __init__(self):
        self.seen: list[tuple[str, str]] = []
        self.reported_usd = 0.0
        self.script: dict = {}
        up = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except OSError:
                    self.close_connection = True

            def __getattr__(self, name):
                if name.startswith("do_"):
                    return self.answer
                raise AttributeError(name)

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                up.seen.append((self.command, self.path.split("?")[0]))
                try:
                    req = json.loads(body)
                except ValueError:
                    req = {}
                up.respond(self, req if isinstance(req, dict) else {})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def respond(self, h, req):
        sc = self.script
        api = "openai" if h.path.startswith("/v1/responses") else "anthropic"
        model = sc["model"] if sc["model"] is not None else req.get("model")
        usage = sc["usage"][api]  # each API's own usage shape (or an odd one)
        status = sc["status"]
        cut = sc["cut"]
        free = h.path.startswith("/v1/messages/count_tokens")
        if sc["form"] == "json":
            payload = {"type": "message", "object": "response", "model": model, "usage": usage}
            if free:
                payload = {"input_tokens": n(usage, "input_tokens")}
            data = json.dumps(payload).encode()
            if cut:
                data = data[: len(data) // 2]
            elif not free:
                self.reported_usd += billed(api, model, usage)
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        if api == "anthropic":
            start = dict(usage, output_tokens=1) if isinstance(usage, dict) else usage
            events = [{"type": "message_start", "message": {"model": model, "usage": start}}]
            sent = start
            if not cut:
                events.append({"type": "message_delta", "usage": {"output_tokens": n(usage, "output_tokens")}})
                sent = usage
        else:
            events = [{"type": "response.created", "response": {"model": model, "usage": None}}]
            sent = None
            if not cut:
                events.append({"type": "response.completed", "response": {"model": model, "usage": usage}})
                sent = usage
        if not free:
            self.reported_usd += billed(api, model, sent)
        h.send_response(status)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for ev in events:
            h.wfile.write(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode())


_STATE: dict = {}


def state() -> dict:
    if not _STATE:
        d = Path(tempfile.mkdtemp(prefix="ai4ai-gw-fuzz-"))
        up = Upstream_()
        gws = {}
        for api in ("anthropic", "openai"):
            gws[api] = Gateway(
                socket_path=d / f"{api}.sock",
                upstream=Upstream.parse(up.base),
                key=KEY,
                auth="x-api-key" if api == "anthropic" else "bearer",
                prices=PRICES,
                log_path=d / f"{api}.jsonl",
                max_usd=1e7,
                max_retries=0,
                read_timeout_s=5.0,
                inflight_wait_s=5.0,
                hangup_drain_s=1.0,
            )
            gws[api].start()
        _STATE.update(up=up, gws=gws, rss0=psutil.Process().memory_info().rss, examples=0)
    return _STATE


def send_raw(path: Path, data: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    s.connect(str(path))
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    got = b""
    try:
        while len(got) < 1 << 22:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    s.close()
    return got


ints = st.one_of(
    st.integers(-5, 5), st.integers(0, 200_000), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 32000, 10**9])
)
odd = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False), ints)
usage_anthropic = st.fixed_dictionaries(
    {"input_tokens": st.integers(0, 300_000), "output_tokens": st.integers(0, 50_000)},
    optional={
        "cache_creation_input_tokens": st.integers(0, 100_000),
        "cache_read_input_tokens": st.integers(0, 100_000),
    },
)
usage_openai = st.builds(
    lambda i, c, o: {
        "input_tokens": i,
        "input_tokens_details": {"cached_tokens": min(c, i)},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": i + o,
    },
    st.integers(0, 300_000),
    st.integers(0, 300_000),
    st.integers(0, 50_000),
)
odd_usage = st.one_of(odd, st.lists(odd, max_size=3), st.dictionaries(st.text(max_size=8), odd, max_size=3))
usages = st.fixed_dictionaries(
    {
        "anthropic": st.one_of(usage_anthropic, usage_anthropic, usage_anthropic, odd_usage),
        "openai": st.one_of(usage_openai, usage_openai, usage_openai, odd_usage),
    }
)

bodies = st.one_of(
    st.fixed_dictionaries(
        {"model": st.one_of(st.sampled_from(MODELS), odd)},
        optional={
            "max_tokens": st.one_of(ints, odd),
            "max_output_tokens": st.one_of(ints, odd),
            "stream": st.booleans(),
            "messages": st.just([{"role": "user", "content": "hi"}]),
            "tools": st.lists(
                st.one_of(
                    st.fixed_dictionaries({"name": st.just("Bash")}),
                    st.fixed_dictionaries({"type": st.sampled_from(["web_search", "function", "mcp", "bash_2025"])}),
                    odd,
                ),
                max_size=3,
            ),
            "previous_response_id": st.sampled_from(["resp_1", None]),
            "service_tier": st.sampled_from(["priority", "auto", None]),
            "input": st.just([{"type": "input_image", "image_url": "https://example.com/x.png"}]),
        },
    ).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=200),
    st.sampled_from([b'{"model": "m", "model": "n"}', b'{"model": "m", "max_tokens": NaN}', b"[1,2]", b"[" * 5000]),
)


good_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(MODELS[:4]), "stream": st.booleans()},
    optional={
        "max_tokens": st.one_of(st.integers(1, 100_000), ints),
        "max_output_tokens": st.one_of(st.integers(1, 100_000), ints),
        "messages": st.just([{"role": "user", "content": "hi " * 50}]),
        "tools": st.just([{"name": "Bash"}, {"type": "web_search_20250305", "name": "web_search"}]),
    },
).map(lambda d: json.dumps(d).encode())


@st.composite
def requests(draw, api: str):
    if draw(st.integers(0, 9)) < 6:  # mostly a well-formed call, to reach the upstream and its answers
        good = ["/v1/messages?beta=true", "/v1/messages/count_tokens"] if api == "anthropic" else ["/v1/responses"]
        path = draw(st.sampled_from(good))
        body = draw(good_bodies)
        if draw(st.booleans()):
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            return head.encode() + body
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 50]), body[i : i + 50]) for i in range(0, len(body), 50))
        return f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunks + b"0\r\n\r\n"
    method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "HEAD", "OPTIONS", "BREW"]))
    path = draw(
        st.sampled_from(
            [
                "/v1/messages",
                "/v1/messages?beta=true",
                "/v1/messages/count_tokens",
                "/v1/responses",
                "/v1/messages/batches",
                "/v1/messages/batches/x/results",
                "/v1/files",
                "/v1/responses/resp_1",
                "/v1/messages?x=1",
                "/v1//messages",
                "/v1/messages/../messages/batches",
                "/",
            ]
        )
    )
    body = draw(bodies)
    framing = draw(
        st.sampled_from(
            ["cl", "cl", "chunked", "cl+te", "cl dup", "cl neg", "cl junk", "cl short", "te junk", "chunk junk", "none"]
        )
    )
    head = [f"{method} {path} HTTP/1.1", "Host: x", "x-api-key: dummy", "Content-Type: application/json"]
    if framing == "cl":
        head.append(f"Content-Length: {len(body)}")
        payload = body
    elif framing == "chunked":
        head.append("Transfer-Encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7))
        payload += b"0\r\n\r\n"
    elif framing == "cl+te":
        head += [f"Content-Length: {len(body)}", "Transfer-Encoding: chunked"]
        payload = body
    elif framing == "cl dup":
        head += [f"Content-Length: {len(body)}", "Content-Length: 3"]
        payload = body
    elif framing == "cl neg":
        head.append("Content-Length: -1")
        payload = body
    elif framing == "cl junk":
        head.append(f"Content-Length: {draw(st.sampled_from(['1e3', '0x10', ' 12 3', '+5', '99999999999999', '٣']))}")
        payload = body
    elif framing == "cl short":
        head.append(f"Content-Length: {len(body) + 10}")
        payload = body
    elif framing == "te junk":
        head.append(f"Transfer-Encoding: {draw(st.sampled_from(['gzip, chunked', 'chunked, chunked', 'identity']))}")
        payload = body
    elif framing == "chunk junk":
        head.append("Transfer-Encoding: chunked")
        size = draw(st.sampled_from([b"-1", b"+5", b"0x5", b"FFFFFFFFF", b"5 5", b"", b"5;" + b"x" * 5000, b"zz"]))
        payload = size + b"\r\n" + body[:5] + b"\r\n0\r\n\r\n"
    else:
        payload = b""
    return "\r\n".join(head).encode("utf-8", "replace") + b"\r\n\r\n" + payload


scripts = st.fixed_dictionaries(
    {
        "form": st.sampled_from(["json", "sse"]),
        "usage": usages,
        "status": st.sampled_from([200, 200, 200, 400, 500]),
        "cut": st.booleans(),
        "model": st.one_of(st.none(), st.sampled_from(MODELS)),
    }
)


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    call=st.sampled_from(["anthropic", "openai"]).flatmap(lambda a: st.tuples(st.just(a), requests(a))), script=scripts
)
def test_gateway_invariants_under_fuzz(call, script):
    api, raw = call
    s = state()
    up, gw = s["up"], s["gws"][api]
    up.script = script
    seen0, reported0, usd0 = len(up.seen), up.reported_usd, gw.totals["usd"]
    send_raw(gw.socket_path, raw)
    t_end = time.monotonic() + 10
    while gw._active and time.monotonic() < t_end:  # the call's settlement is done
        time.sleep(0.005)
    assert gw._active == 0
    new = up.seen[seen0:]
    assert all(x in ALLOWED for x in new), new  # nothing outside the allow-list reached the upstream
    assert len(new) <= 1
    recorded = gw.totals["usd"] - usd0
    reported = up.reported_usd - reported0
    assert recorded >= reported - 1e-6 * max(1.0, reported), (recorded, reported, script, raw[:300])
    assert abs(gw.reserved_usd) < 1e-9  # every reservation was released or settled
    s["examples"] += 1
    # still serving: an unlisted path is answered 404, without reaching the upstream
    assert send_raw(gw.socket_path, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert len(up.seen) == seen0 + len(new)


def test_fuzz_memory_bounded_and_still_serving():
    """Runs after the fuzzer (same module, in file order): the harness grew by less than 200 MiB."""
    s = state()
    grown = psutil.Process().memory_info().rss - s["rss0"]
    assert grown < 200 << 20, f"the harness grew by {grown >> 20} MiB over {s['examples']} requests"
    for gw in s["gws"].values():
        assert send_raw(gw.socket_path, b"OPTIONS / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404")
