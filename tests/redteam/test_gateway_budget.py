"""Red-team probes of the API gateway's accounting (issue 39, part 6: "the gateway forwards what it
cannot account for"), each driving the real Gateway against the fake model API:

(a) an endpoint no CLI uses (Anthropic's message batches, whose results come as JSON lines): it must
    be refused without reaching the upstream; before, both calls (POST the batch, GET its results)
    were forwarded with the real key, and its usage (20 requests, 440k prompt tokens, 0.50 USD at
    this probe's prices) recorded as 0 tokens, 0 USD;
(b) 40 concurrent calls against max_usd 1.0: each call's worst case is reserved before it is
    forwarded, so the recorded cost never passes the cap; before, the cap was checked only as a call
    arrived: 26 of the 40 were forwarded and 3.39 USD recorded against the 1.0 cap;
(c) a chunked body whose chunk size is "-1", signed, "0x"-prefixed or absurdly large: refused at
    once (400), the harness's memory flat; before, "-1" read the whole stream (160 MiB sent: peak
    RSS +318 MiB) before a 413, "+40" and "0x40" were read as 64 and the call forwarded, and the
    huge sizes crashed the handler (no answer at all);
(d) a model missing from the price table is priced at the table's highest prices, not `default`;
    before, 0.0015 USD recorded for a call worth 0.0075 at the highest price.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import Counter

import psutil
import pytest

from ai4ai.window.gateway import Gateway, Upstream
from ai4ai.window.usage import cost_usd, normalize_usage, price_for

KEY = "sk-test-REAL-KEY-redteam-gateway-budget-91f3"
PRICES = {
    "default": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "output": 5.0},
    "claude-haiku": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "output": 5.0},
    "claude-opus": {"input": 5.0, "cached_input": 0.5, "cache_write": 6.25, "output": 25.0},
}


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("gateway", timeout=timeout)
        self._path = path

    def connect(self):
        # a full listen backlog answers EAGAIN on a unix socket: try again, as a forwarder would
        for _ in range(200):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(self.timeout)
            try:
                return self.sock.connect(self._path)
            except (BlockingIOError, ConnectionRefusedError):
                self.sock.close()
                time.sleep(0.05)
        raise ConnectionRefusedError(self._path)


def start_gateway(tmp_path, api, **kw) -> Gateway:
    gw = Gateway(
        socket_path=tmp_path / "api.sock",
        upstream=Upstream.parse(api.base),
        key=KEY,
        auth="x-api-key",
        prices=PRICES,
        log_path=tmp_path / "api_calls.jsonl",
        backoff_s=0.05,
        **kw,
    )
    gw.start()
    return gw


def request(gw, method, path, body=None):
    c = UnixHTTP(str(gw.socket_path))
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


def reported_usd(api) -> float:
    return api.totals(PRICES)[1]


def test_a_unlisted_endpoint_is_refused_not_forwarded(tmp_path, fake_api):
    """A message batch: created by POST, its results read by GET as JSON lines of usages."""
    api = fake_api("edit", KEY)
    gw = start_gateway(tmp_path, api)
    batch = {"requests": [{"custom_id": "r0", "params": {"model": "claude-sonnet-4-5", "max_tokens": 500}}]}
    created = request(gw, "POST", "/v1/messages/batches", batch)
    results = request(gw, "GET", "/v1/messages/batches/msgbatch_fake/results")
    gw.stop()
    s = gw.summary()
    print(f"batch: statuses {created[0]}, {results[0]}; upstream saw {len(api.requests)} requests,")
    print(f"  reported {api.totals(PRICES)[0]['input_tokens']} input tokens, {reported_usd(api):.4f} USD;")
    print(f"  the gateway recorded {s['input_tokens']} input tokens, {s['usd']:.4f} USD")
    assert s["usd"] >= reported_usd(api) - 1e-9  # the invariant
    assert api.requests == [] and api.bad_keys == 0, api.requests  # nothing reached the upstream
    assert created[0] in (403, 404) and results[0] in (403, 404)
    rows = [json.loads(x) for x in (tmp_path / "api_calls.jsonl").read_text().splitlines()]
    assert [(r["method"], r.get("refused")) for r in rows] == [("POST", "route"), ("GET", "route")]


def test_b_concurrent_calls_never_pass_the_cap(tmp_path, fake_api):
    """Each capped-mode answer reports 170k prompt tokens (~0.13 USD here); the request carries
    that much prompt, so the gateway's worst case for it is sound. 40 at once, max_usd 1.0."""
    api = fake_api("cap", KEY)
    tripped = threading.Event()
    gw = start_gateway(tmp_path, api, max_usd=1.0, on_cap=tripped.set)
    pad = "x " * 100_000  # 200 kB of prompt: at least as many bytes as the tokens the API reports
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 1000,
        "stream": True,
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": pad}],
    }
    statuses: list[int] = []
    go = threading.Barrier(40)

    def one():
        go.wait()
        try:
            for _ in range(100):  # a 429 is tried again, as the CLIs do
                status = request(gw, "POST", "/v1/messages", body)[0]
                if status != 429:
                    break
                time.sleep(0.1)
            statuses.append(status)
        except OSError as e:
            statuses.append(type(e).__name__)

    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    gw.stop()
    s = gw.summary()
    reported = reported_usd(api)
    print(f"40 concurrent: {dict(Counter(statuses))};")
    print(f"  upstream reported {reported:.4f} USD, the gateway recorded {s['usd']:.4f} USD against max_usd 1.0")
    assert s["usd"] >= reported - 1e-6  # recorded >= what the upstream reported
    assert s["usd"] <= 1.0, s  # and the cap is never passed
    assert s["refused"] > 0 and tripped.is_set() and s["capped"]


def _peak_rss_while(fn) -> tuple[int, object]:
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        out = fn()
    finally:
        done.set()
        t.join()
    return peak[0] - base, out


def _send_chunked(gw, size_line: bytes, total: int) -> tuple[bytes, float]:
    """Headers, one chunk-size line, then `total` bytes (as fast as the gateway takes them) and EOF;
    (the gateway's answer, seconds until it answered)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(gw.socket_path))
    t0 = time.monotonic()
    s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n")
    block = b"a" * (1 << 20)
    try:
        for _ in range(total // len(block)):
            s.sendall(block)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # refused and closed while we were still sending: what we want
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    s.close()
    return got, time.monotonic() - t0


@pytest.mark.parametrize("size_line", [b"-1", b"-0x10", b"FFFFFFFFFFFFFFFF", b"1" + b"0" * 40, b"+40", b"0x40"])
def test_c_malformed_chunk_size_refused_before_buffering(tmp_path, fake_api, size_line):
    api = fake_api("edit", KEY)
    gw = start_gateway(tmp_path, api)
    grown, (answer, took) = _peak_rss_while(lambda: _send_chunked(gw, size_line, 160 << 20))
    gw.stop()
    status = answer.split(b"\r\n", 1)[0]
    print(f"chunk size {size_line[:20]!r}: answered {status!r} after {took:.2f} s, peak RSS +{grown >> 20} MiB")
    assert status.split()[1:2] in ([b"400"], [b"413"]), answer[:200]
    assert grown < 48 << 20, f"the harness grew by {grown >> 20} MiB"
    assert api.requests == []


def test_d_unknown_model_priced_at_the_highest_price(tmp_path, fake_api):
    api = fake_api("edit", KEY)
    gw = start_gateway(tmp_path, api)
    msgs = [{"role": "user", "content": "go"}]
    status, _ = request(gw, "POST", "/v1/messages", {"model": "mystery-9", "max_tokens": 100, "messages": msgs})
    gw.stop()
    highest = {"input": 5.0, "cached_input": 0.5, "cache_write": 6.25, "output": 25.0}
    assert price_for(PRICES, "mystery-9") == highest and price_for(PRICES, None) == highest
    want = sum(cost_usd(normalize_usage(r["usage"]), highest) for r in api.reported)
    s = gw.summary()
    print(f"unknown model: recorded {s['usd']:.4f} USD; at the highest price {want:.4f}")
    assert status == 200 and s["usd"] == pytest.approx(want, abs=1e-6)
