"""The API gateway of the coding-agent CLIs: the only road from an agent's sandbox to its model.

The sandbox has no network (`network=api_only`). Its CLI is pointed at a plain-http endpoint on
127.0.0.1 inside the sandbox (`ai4ai-launch --forward` relays it to a unix socket bound in);
the harness serves that socket here and forwards each request to the configured upstream
(`agent.base_url`, TLS for https, plain http allowed for a local server), so:

- the real key never enters the sandbox: the CLI holds a dummy, the gateway drops every auth
  header it sends and injects the real key (`x-api-key` or `Authorization: Bearer`);
- usage is read from the API's own responses (JSON bodies and SSE streams, Anthropic Messages
  and OpenAI Responses / Chat Completions), per request, priced from the agent config, and
  counted as the bytes pass; when the agent's side hangs up mid-answer (its window ended), the
  rest of the answer is still read (not relayed) for up to `hangup_drain_s`, so the usage the
  upstream reports at its end is counted; an answer not read to its end counts what it reported
  so far and is counted in `partial_calls`;
- once the recorded cost reaches `max_usd`, the next request is refused (and logged) and
  `on_cap` is called so the harness ends the agent;
- 429 and 5xx answers are retried with backoff, honouring `Retry-After`, before anything is
  sent back; each retry is recorded;
- every call is appended to a JSON-lines log in the run directory.

Nothing the agent's processes print is read for cost: this module is the only source.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

from ai4ai.window.usage import MAX_BODY, TOKEN_KEYS, UsageReader, cost_usd, price_for

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "accept-encoding",
}
AUTH_HEADERS = {"x-api-key", "authorization", "api-key"}
RETRY_STATUSES = {429, 500, 502, 503, 504, 529}


class GatewayError(ValueError):
    """A bad gateway configuration (raised before the agent starts)."""


@dataclass(frozen=True)
class Upstream:
    scheme: str
    host: str
    port: int
    path: str  # the base URL's path; the CLI is given the same path on the gateway

    @classmethod
    def parse(cls, url: str) -> Upstream:
        u = urlsplit(str(url))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise GatewayError(f"agent.base_url={url!r}: use an http(s) URL such as https://api.anthropic.com")
        return cls(u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80), u.path.rstrip("/"))

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class Gateway:
    socket_path: Path
    upstream: Upstream
    key: str
    auth: str  # x-api-key | bearer
    prices: dict
    log_path: Path
    max_usd: float | None = None
    on_cap: Callable[[], None] | None = None
    max_retries: int = 4
    backoff_s: float = 1.0
    max_wait_s: float = 60.0
    timeout_s: float = 600.0
    extra_headers: dict = field(default_factory=dict)
    totals: dict = field(default_factory=lambda: dict(dict.fromkeys(TOKEN_KEYS, 0), usd=0.0))
    calls: int = 0  # calls that reached the upstream (any status)
    ok_calls: int = 0  # of them, answered 2xx
    refused: int = 0
    retries: int = 0
    failures: int = 0  # the upstream could not be reached at all
    partial_calls: int = 0  # answers cut before their end: usage may be short
    unfinished_calls: int = 0  # calls still in flight when stop() gave up on them
    hangup_drain_s: float = 5.0  # how long the rest of an answer is read after a hang-up
    capped: bool = False
    last_status: int | None = None

    def __post_init__(self):
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        gw = self

        class Handler(_Handler):
            gateway = gw

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a")
        self._srv = _Server(str(self.socket_path), Handler)
        self.socket_path.chmod(0o777)  # the sandbox's unprivileged user connects to it
        threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def stop(self, drain_s: float = 10.0) -> None:
        """Stop accepting; give calls in flight `drain_s` to record what they saw."""
        self._srv.shutdown()
        self._srv.server_close()
        with self._idle:
            self._idle.wait_for(lambda: self._active == 0, timeout=drain_s)
            self.unfinished_calls = self._active  # still waiting on the upstream: not counted
        with self._lock:
            self._log.close()

    def summary(self) -> dict:
        with self._lock:
            return {
                **{k: self.totals[k] for k in TOKEN_KEYS},
                "usd": round(self.totals["usd"], 6),
                "calls": self.calls,
                "ok_calls": self.ok_calls,
                "refused": self.refused,
                "retries": self.retries,
                "failures": self.failures,
                "partial_calls": self.partial_calls,
                "unfinished_calls": self.unfinished_calls,
                "capped": self.capped,
                "source": "gateway",
                "upstream": f"{self.upstream.scheme}://{self.upstream.host_port}",
            }

    # ------------------------------------------------------------------ bookkeeping
    def _write(self, row: dict) -> None:
        with self._lock:
            if not self._log.closed:
                self._log.write(json.dumps(row) + "\n")
                self._log.flush()

    def over_cap(self) -> bool:
        with self._lock:
            return self.max_usd is not None and self.totals["usd"] >= float(self.max_usd)

    def account(self, tokens: dict, usd: float) -> None:
        with self._lock:
            for k in TOKEN_KEYS:
                self.totals[k] += tokens[k]
            self.totals["usd"] += usd
            tripped = self.max_usd is not None and self.totals["usd"] >= float(self.max_usd) and not self.capped
            if tripped:
                self.capped = True
        if tripped and self.on_cap:
            self.on_cap()

    def connect(self) -> http.client.HTTPConnection:
        u = self.upstream
        if u.scheme == "https":
            return http.client.HTTPSConnection(
                u.host, u.port, timeout=self.timeout_s, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(u.host, u.port, timeout=self.timeout_s)

    def retry_wait(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), self.max_wait_s)
            except ValueError:
                when = email.utils.parsedate_to_datetime(retry_after) if retry_after else None
                if when is not None:
                    return min(max(when.timestamp() - time.time(), 0.0), self.max_wait_s)
        return min(self.backoff_s * (2**attempt), self.max_wait_s)


class _Handler(BaseHTTPRequestHandler):
    gateway: Gateway
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the call log is ours; no stderr chatter
        pass

    def address_string(self):
        return "sandbox"

    def do_GET(self):
        self._proxy()

    def do_POST(self):
        self._proxy()

    # ------------------------------------------------------------------
    def _read_body(self) -> bytes | None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
                if len(body) > MAX_BODY:
                    return None
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n <= MAX_BODY else None

    def _reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _error(self, status: int, kind: str, message: str) -> None:
        # Both vendors' error shapes at once, so either CLI shows the message.
        self._reply(status, {"type": "error", "error": {"type": kind, "message": message, "code": kind}})

    def _proxy(self) -> None:
        gw = self.gateway
        with gw._lock:
            gw._active += 1
        try:
            self._proxy_inner(gw)
        finally:
            with gw._idle:
                gw._active -= 1
                gw._idle.notify_all()

    def _proxy_inner(self, gw: Gateway) -> None:
        t0 = time.time()
        row = {"t": round(t0, 3), "method": self.command, "path": self.path.split("?")[0]}
        body = self._read_body()
        if body is None:
            row.update(status=413, refused="request body too large")
            gw._write(row)
            return self._error(413, "request_too_large", "ai4ai gateway: request body too large")
        try:
            req = json.loads(body) if body else {}
        except ValueError:
            req = {}
        req = req if isinstance(req, dict) else {}
        row["model"] = req.get("model")
        streaming = bool(req.get("stream"))
        if gw.over_cap():
            with gw._lock:
                gw.refused += 1
            row.update(status=403, refused="max_usd", usd_so_far=round(gw.totals["usd"], 6))
            gw._write(row)
            return self._error(
                403,
                "permission_error",
                f"ai4ai gateway: this run's spending cap (max_usd={gw.max_usd}) is reached; "
                "no further model calls are allowed",
            )
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | AUTH_HEADERS}
        headers.update(gw.extra_headers)
        if gw.auth == "bearer":
            headers["Authorization"] = f"Bearer {gw.key}"
        else:
            headers["x-api-key"] = gw.key
        headers["Host"] = gw.upstream.host if gw.upstream.port in (80, 443) else gw.upstream.host_port
        headers["Accept-Encoding"] = "identity"  # usage is read from the plain bytes
        retries = []
        resp = conn = sock = None
        for attempt in range(gw.max_retries + 1):
            try:
                conn = gw.connect()
                conn.request(self.command, self.path, body=body if body else None, headers=headers)
                sock = conn.sock  # the answer's socket; getresponse() may hand it to resp
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                resp = None
                if attempt < gw.max_retries:
                    wait = gw.retry_wait(attempt, None)
                    retries.append({"status": None, "error": type(e).__name__, "wait_s": round(wait, 2)})
                    time.sleep(wait)
                    continue
                with gw._lock:
                    gw.failures += 1
                row.update(
                    status=502,
                    error=f"upstream unreachable: {type(e).__name__}",
                    retries=retries,
                    latency_s=round(time.time() - t0, 3),
                )
                gw._write(row)
                return self._error(502, "api_error", f"ai4ai gateway: upstream {gw.upstream.host_port} unreachable")
            if resp.status in RETRY_STATUSES and attempt < gw.max_retries:
                wait = gw.retry_wait(attempt, resp.getheader("Retry-After"))
                resp.read()
                conn.close()
                retries.append({"status": resp.status, "wait_s": round(wait, 2)})
                with gw._lock:
                    gw.retries += 1
                time.sleep(wait)
                continue
            break
        with gw._lock:
            gw.calls += 1
            gw.ok_calls += 200 <= resp.status < 300
            gw.last_status = resp.status
        event_stream = "text/event-stream" in (resp.getheader("Content-Type") or "")
        reader = UsageReader(streaming or event_stream)
        # who ended the answer: "upstream" (it ran to its end), "agent" (the agent's side hung up and
        # the rest was read here to its end), "agent, drain cut" (the rest was not all read within
        # `hangup_drain_s`: the usage counted may be short), "upstream error"
        ended = "upstream"
        agent_gone = False
        try:
            try:
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP | {"content-encoding"}:
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
            except OSError:
                agent_gone = True
            self.close_connection = True
            drain_until = None
            while True:
                if agent_gone and drain_until is None:
                    # The agent's side went away (it was ended, or it stopped reading after the last
                    # event it needed). The upstream bills the answer it goes on generating, and its
                    # usage comes at the end (Anthropic's message_delta, OpenAI's response.completed):
                    # read the rest, unrelayed, so the cost is counted, for at most hangup_drain_s.
                    ended = "agent"
                    drain_until = time.monotonic() + gw.hangup_drain_s
                if drain_until is not None:
                    left = drain_until - time.monotonic()
                    if left <= 0:
                        ended = "agent, drain cut"
                        break
                    sock.settimeout(left)
                try:
                    chunk = resp.read1(65536)
                except TimeoutError:
                    ended = "agent, drain cut" if agent_gone else "upstream error"
                    break
                except (OSError, http.client.HTTPException):
                    ended = "upstream error"
                    break
                if not chunk:
                    break
                reader.feed(chunk)
                if not agent_gone:
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    except OSError:
                        agent_gone = True
            if not agent_gone:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
        finally:
            conn.close()
            reader.finish()
            tokens = reader.tokens()
            model = reader.model or row.get("model")
            usd = cost_usd(tokens, price_for(gw.prices, model))
            gw.account(tokens, usd)
            if ended == "agent, drain cut":
                with gw._lock:
                    gw.partial_calls += 1
            row.update(
                model=model,
                status=resp.status,
                stream=reader.streaming,
                ended=ended,
                latency_s=round(time.time() - t0, 3),
                usage=tokens,
                usd=round(usd, 6),
                retries=retries,
            )
            gw._write(row)
