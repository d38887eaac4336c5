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
- only the routes the supported CLIs use are forwarded (`ROUTES`, by API: Claude Code's
  POST /v1/messages and /v1/messages/count_tokens, Codex's POST {base}/responses); any other
  method or path is refused (404) without reaching the upstream, and logged;
- a request's framing is read strictly (one decimal Content-Length, or chunks of hex sizes, never
  both, at most MAX_BODY in all, checked before each chunk is read); its body must be one JSON
  object (no repeated keys) and is forwarded re-serialized, so the upstream reads what was priced;
  what cannot be bounded (server-side tools, fetched URLs, stored files or responses, a priority
  tier) is refused;
- before a call is forwarded its worst case is reserved: the body's bytes as prompt tokens (plus
  allowances per image or document) at the model's highest prompt price, and its output cap
  (max_tokens / max_output_tokens; the gateway sets `default_max_output` where the CLI sent none) at
  its output price; a call whose reservation, with what is spent and reserved, would pass
  `max_usd` is refused (402), and `on_cap` is called so the harness ends the agent when what is
  spent alone leaves no room for it; at most `max_inflight` calls are in flight (others wait up to
  `inflight_wait_s`, then 429);
- when the call ends it is settled at the cost the upstream reported; an answer whose final usage
  was not read (none, unreadable, a stream cut before it) is charged its reservation (the worst
  case); a model missing from the price table is priced at the table's highest prices;
- 429 and 5xx answers are retried with backoff, honouring `Retry-After`, before anything is
  sent back; each retry is recorded;
- every call is appended to a JSON-lines log in the run directory.

Nothing the agent's processes print is read for cost: this module is the only source.

It is one file of over 500 lines on purpose: the framing, the reservation, the settlement and the
log all read and write one ledger under one lock, and its invariant (recorded cost >= what the
upstream reported, spent + reserved <= max_usd) is checked by reading this file alone.
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

from ai4ai.window.usage import MAX_BODY, TOKEN_KEYS, UsageReader, cost_usd, input_price, price_for

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

# The routes the supported CLIs use, by API (the gateway's `api`), relative to the upstream's base
# path: what Claude Code 2.1.332 and Codex 0.171 sent through the gateway in tests/agents (Claude
# Code: POST /v1/messages?beta=true; Codex, its provider's base_url ending in /v1: POST
# {base}/responses), and Anthropic's token counting, which Claude Code may call and which is free.
# Codex's websocket and model listing are off (codex.py), and no other path is ever forwarded.
ROUTES = {
    "anthropic": {("POST", "/v1/messages"): "messages", ("POST", "/v1/messages/count_tokens"): "count"},
    "openai": {("POST", "/responses"): "responses", ("POST", "/v1/responses"): "responses"},
}
QUERIES = {"", "beta=true"}  # Claude Code's only query string
# The output cap of each API's request, and where the gateway sets `default_max_output` if absent.
OUTPUT_CAP = {"messages": "max_tokens", "responses": "max_output_tokens", "count": None}
PROMPT_OVERHEAD = 4096  # tokens the API adds to a prompt beyond its bytes (tool-use system prompt)
MEDIA_TOKENS = {  # a bound on the prompt tokens of one inline media block, beyond its bytes
    "image": 6_400,
    "input_image": 6_400,
    "document": 400_000,  # a PDF: up to 100 pages, each as text and an image
    "input_file": 400_000,
}
# Tool types the client runs itself; any other (web search, code execution, MCP, file search...) is
# run and billed by the upstream in ways its usage block does not price: dropped from the request.
CLIENT_TOOLS = {"custom", "function", "local_shell"}
CLIENT_TOOL_PREFIXES = ("bash_", "text_editor_", "computer_", "memory_")
SERVER_STATE = {  # request fields that make the upstream read (and bill) what the body does not hold
    "messages": ("mcp_servers", "container"),
    "responses": ("previous_response_id", "conversation", "prompt", "background"),
    "count": ("mcp_servers",),
}
SERVICE_TIERS = {None, "auto", "default", "standard_only", "flex"}  # priced as the table says
DROPPED_BETAS = ("context-1m",)  # long-context pricing: above 200k prompt tokens, not the table's
MAX_LINE = 4096  # a chunk-size or trailer line
CHUNK_SIZE_DIGITS = 8  # hex digits of one chunk size


class Refused(Exception):
    """A request the gateway does not forward: (status, kind, message, why for the log)."""

    def __init__(self, status: int, kind: str, message: str, why: str):
        super().__init__(message)
        self.status, self.kind, self.why = status, kind, why


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
    request_queue_size = 128  # a burst of connections waits for accept() rather than being refused


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
    api: str | None = None  # anthropic | openai (ROUTES); None: anthropic for x-api-key, else openai
    max_inflight: int = 8  # calls forwarded at once; more wait up to inflight_wait_s, then 429
    inflight_wait_s: float = 30.0
    default_max_output: int = 32_000  # the output cap set on a call that names none
    read_timeout_s: float = 60.0  # to send a request's head and body
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
    reserved_usd: float = 0.0  # the worst cases of the calls in flight
    worst_case_calls: int = 0  # answers charged their reservation: their final usage was not read

    def __post_init__(self):
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._slots = threading.BoundedSemaphore(max(int(self.max_inflight), 1))
        if self.api is None:
            self.api = "anthropic" if self.auth != "bearer" else "openai"
        if self.api not in ROUTES:
            raise GatewayError(f"gateway api={self.api!r}: one of {sorted(ROUTES)}")

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        gw = self

        class Handler(_Handler):
            gateway = gw
            timeout = gw.read_timeout_s

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
                "worst_case_calls": self.worst_case_calls,
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

    def route(self, method: str, target: str) -> str | None:
        """The kind of call (ROUTES) of a request line, or None: not forwarded."""
        path, _, query = target.partition("?")
        base = self.upstream.path
        if query not in QUERIES or not path.startswith(base + "/"):
            return None
        return ROUTES[self.api].get((method, path[len(base) :]))

    def reserve(self, usd: float) -> str | None:
        """Hold `usd` of the budget for a call about to be forwarded; None, or why it may not be:
        "max_usd" (what is spent leaves no room for it: the cap trips), "in flight" (the calls in
        flight hold the room it needs: it may fit once they settle)."""
        tripped = False
        with self._lock:
            cap = None if self.max_usd is None else float(self.max_usd)
            if cap is not None and (self.totals["usd"] >= cap or self.totals["usd"] + usd > cap):
                tripped, self.capped = not self.capped, True
                why = "max_usd"
            elif cap is not None and self.totals["usd"] + self.reserved_usd + usd > cap:
                why = "in flight"
            else:
                self.reserved_usd += usd
                return None
        if tripped and self.on_cap:
            self.on_cap()
        return why

    def account(self, tokens: dict, usd: float, reserved: float = 0.0) -> None:
        """Settle a call: release its reservation, add what it cost."""
        with self._lock:
            self.reserved_usd = max(self.reserved_usd - reserved, 0.0)
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


def _object(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):  # parsers differ on which of two equal keys wins: none is priced
        raise ValueError("a key appears twice in one object")
    return d


def _constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _bad(why: str, message: str, status: int = 400) -> Refused:
    kind = "request_too_large" if status == 413 else "invalid_request_error"
    return Refused(status, kind, f"ai4ai gateway: {message}; not forwarded", why)


def prepare(gw: Gateway, kind: str, body: bytes) -> tuple[dict, bytes, float, list]:
    """(the request, the bytes forwarded for it, its worst-case cost, the server tools dropped from
    it), or Refused: a body that is one JSON object the upstream will read as the gateway does,
    naming a model, an output cap (set to `default_max_output` when absent) and nothing the
    upstream would bill beyond its bytes."""
    try:
        req = json.loads(body, object_pairs_hook=_object, parse_constant=_constant)
    except (ValueError, RecursionError) as e:
        raise _bad("body: not JSON", f"the request body is not one JSON object ({str(e)[:80]})") from None
    if not isinstance(req, dict):
        raise _bad("body: not an object", "the request body is not one JSON object")
    model = req.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("body: no model", "the request names no model")
    for name in SERVER_STATE[kind]:
        if req.get(name) not in (None, False):
            raise _bad(f"body: {name}", f"`{name}` makes the API read what the request does not hold")
    tier = req.get("service_tier")
    if not (tier is None or isinstance(tier, str)) or tier not in SERVICE_TIERS:
        raise _bad("body: service_tier", f"service_tier={tier!r} is not priced by this run's table")
    tools = req.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise _bad("body: tools", "`tools` is not a list")
    stripped: list[str] = []

    def client_only(items: list) -> list:
        """The tools the client runs; any other (web search, code execution, MCP, file search...) is
        run and billed by the API in ways its usage block does not price, and reaches the network
        the sandbox has not: it is dropped from the request (and named in the log)."""
        kept = []
        for t in items:
            kind_ = t.get("type") if isinstance(t, dict) else "?"
            if kind_ == "namespace" and isinstance(t.get("tools"), list):  # Codex: a group of tools
                kept.append(dict(t, tools=client_only(t["tools"])))
            elif kind_ is None or (
                isinstance(kind_, str) and (kind_ in CLIENT_TOOLS or kind_.startswith(CLIENT_TOOL_PREFIXES))
            ):
                kept.append(t)
            else:
                stripped.append(str(kind_)[:40])
        return kept

    if tools is not None:
        req["tools"] = client_only(tools)
    media, hour = 0, False
    stack = [req]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        hour = hour or node.get("ttl") not in (None, "5m")  # a cache write at the 1-hour price
        block = node.get("type")
        if not isinstance(block, str):
            continue
        if block == "container_upload" or (block in MEDIA_TOKENS and node.get("file_id") is not None):
            raise _bad("body: stored file", "a stored file is read by the API, not sent")
        if block in MEDIA_TOKENS:
            media += MEDIA_TOKENS[block]
            src = node.get("source")
            if isinstance(src, dict) and src.get("type") not in (None, "base64", "text", "content"):
                raise _bad("body: fetched source", f"a {block} of source type {str(src.get('type'))[:40]!r}")
            for key in ("image_url", "file_url", "url"):
                url = node.get(key)
                url = url.get("url") if isinstance(url, dict) else url
                if url is not None and not (isinstance(url, str) and url.startswith("data:")):
                    raise _bad("body: fetched source", f"a {block} the API would fetch from a URL")
    cap_key = OUTPUT_CAP[kind]
    cap = 0
    if cap_key:
        cap = req.get(cap_key)
        if cap is None:
            cap = req[cap_key] = int(gw.default_max_output)
        if not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0:
            raise _bad(f"body: {cap_key}", f"{cap_key}={str(cap)[:40]} is not a positive integer")
    out = json.dumps(req).encode()
    if len(out) > MAX_BODY:
        raise _bad("body too large", "request body too large", 413)
    if kind == "count":  # token counting is not billed
        return req, out, 0.0, stripped
    table = price_for(gw.prices, model)
    worst = (len(out) + PROMPT_OVERHEAD + media) * input_price(table, hour) + cap * float(table.get("output") or 0.0)
    return req, out, worst / 1e6, stripped


class _Handler(BaseHTTPRequestHandler):
    gateway: Gateway
    protocol_version = "HTTP/1.1"
    timeout = 60.0  # to send the request line and headers (the gateway's read_timeout_s)

    def log_message(self, fmt, *args):  # the call log is ours; no stderr chatter
        pass

    def address_string(self):
        return "sandbox"

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # every method is answered (and logged) here, most refused
            return self._proxy
        raise AttributeError(name)

    # ------------------------------------------------------------------
    def _framing(self) -> int | None:
        """The body's length from a Content-Length, or None: chunked. Refused: anything else."""
        te = self.headers.get_all("Transfer-Encoding") or []
        cl = self.headers.get_all("Content-Length") or []
        if te:
            if len(te) != 1 or te[0].strip().lower() != "chunked" or cl:
                raise _bad("framing", "only Transfer-Encoding: chunked, alone and without Content-Length, is read")
            return None
        if len(cl) > 1:
            raise _bad("framing", "Content-Length given more than once")
        if not cl:
            return 0
        v = cl[0].strip()
        if not (v.isascii() and v.isdigit() and len(v) <= 12):
            raise _bad("framing", f"Content-Length {v[:20]!r} is not a decimal length")
        if int(v) > MAX_BODY:
            raise _bad("body too large", "request body too large", 413)
        return int(v)

    def _read_body(self, length: int | None) -> bytes:
        if length is not None:
            body = self.rfile.read(length)
            if len(body) != length:
                raise _bad("framing", "the body is shorter than its Content-Length")
            return body
        parts, total = [], 0
        while True:
            line = self.rfile.readline(MAX_LINE + 1)
            if not line.endswith(b"\n"):
                raise _bad("framing", "a chunk-size line is cut or too long")
            size = line.rstrip(b"\r\n").split(b";", 1)[0].strip(b" \t")
            if not (0 < len(size) <= CHUNK_SIZE_DIGITS and all(c in b"0123456789abcdefABCDEF" for c in size)):
                raise _bad("framing", f"chunk size {size[:20]!r} is not a hex number")
            n = int(size, 16)
            if n == 0:
                for _ in range(64):  # trailers: read, bounded, dropped
                    t = self.rfile.readline(MAX_LINE + 1)
                    if t in (b"\r\n", b"\n"):
                        return b"".join(parts)
                    if not t.endswith(b"\n"):
                        break
                raise _bad("framing", "the chunked body does not end")
            total += n
            if total > MAX_BODY:  # before reading it
                raise _bad("body too large", "request body too large", 413)
            data = self.rfile.read(n)
            if len(data) != n or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _bad("framing", "a chunk is shorter than its size")
            parts.append(data)

    def _reply(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _error(self, status: int, kind: str, message: str, headers: dict | None = None) -> None:
        # Both vendors' error shapes at once, so either CLI shows the message.
        self._reply(status, {"type": "error", "error": {"type": kind, "message": message, "code": kind}}, headers)

    def _proxy(self) -> None:
        gw = self.gateway
        with gw._lock:
            gw._active += 1
        slot = False
        t0 = time.time()
        row = {"t": round(t0, 3), "method": self.command[:16], "path": self.path.split("?")[0][:200]}
        try:
            try:
                kind = gw.route(self.command, self.path)
                if kind is None:
                    cl = self.headers.get_all("Content-Length") or []
                    if not self.headers.get("Transfer-Encoding") and len(cl) == 1 and cl[0].strip().isdigit():
                        if int(cl[0]) <= 1 << 20:  # a small body is read (and dropped): the answer is seen
                            self.rfile.read(int(cl[0]))
                    raise Refused(
                        404,
                        "not_found_error",
                        f"ai4ai gateway: {self.command[:16]} {row['path']} is not a call this agent's CLI makes; "
                        "not forwarded",
                        "route",
                    )
                length = self._framing()
                if not gw._slots.acquire(timeout=gw.inflight_wait_s):
                    raise Refused(
                        429,
                        "rate_limit_error",
                        f"ai4ai gateway: {gw.max_inflight} calls are in flight; try again",
                        "in flight (max_inflight)",
                    )
                slot = True
                body = self._read_body(length)
                req, body, worst, stripped = prepare(gw, kind, body)
                row["model"] = req.get("model")
                if stripped:
                    row["tools_dropped"] = stripped
                why = gw.reserve(worst)
                if why == "max_usd":
                    raise Refused(
                        403,
                        "permission_error",
                        f"ai4ai gateway: this run's spending cap (max_usd={gw.max_usd}) is reached: this call's "
                        f"worst case ({worst:.4f} USD) does not fit in what is left; no further model calls "
                        "are allowed",
                        "max_usd",
                    )
                if why:
                    raise Refused(
                        429,
                        "rate_limit_error",
                        f"ai4ai gateway: the calls in flight hold what is left of max_usd={gw.max_usd}; "
                        "try again when they end",
                        "max_usd, in flight",
                    )
            except Refused as r:
                with gw._lock:
                    gw.refused += 1
                    usd_so_far = round(gw.totals["usd"], 6)
                row.update(status=r.status, refused=r.why, usd_so_far=usd_so_far)
                if r.why.startswith("max_usd"):
                    row["worst_usd"] = round(worst, 6)
                gw._write(row)
                retry = {"Retry-After": "1"} if r.status == 429 else None
                return self._error(r.status, r.kind, str(r), retry)
            except (OSError, ValueError):  # the request never came whole (a timeout, a hang-up)
                row.update(status=408, refused="framing: the request was not sent whole in time")
                gw._write(row)
                self.close_connection = True
                return
            self.connection.settimeout(gw.timeout_s)
            self._forward(gw, kind, req, body, worst, row, t0)
        finally:
            if slot:
                gw._slots.release()
            with gw._idle:
                gw._active -= 1
                gw._idle.notify_all()

    def _forward(self, gw: Gateway, kind: str, req: dict, body: bytes, worst: float, row: dict, t0: float) -> None:
        self._settled = False
        try:
            self._forward_inner(gw, kind, req, body, worst, row, t0)
        finally:
            if not self._settled:  # nothing reached the upstream (or this failed early): release the hold
                gw.account(dict.fromkeys(TOKEN_KEYS, 0), 0.0, worst)

    def _forward_inner(
        self, gw: Gateway, kind: str, req: dict, body: bytes, worst: float, row: dict, t0: float
    ) -> None:
        dropped = HOP_BY_HOP | AUTH_HEADERS | {"content-encoding", "content-type"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
        for k in [k for k in headers if k.lower() == "anthropic-beta"]:
            betas = [b.strip() for b in headers.pop(k).split(",")]
            betas = [b for b in betas if b and not b.startswith(DROPPED_BETAS)]
            if betas:
                headers[k] = ",".join(betas)
        headers["Content-Type"] = "application/json"
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
        # read as its Content-Type says (a JSON body that fails to parse is tried as events)
        reader = UsageReader(event_stream)
        done = []

        def settle() -> None:
            """Price what the answer reported, release the call's reservation, log it; once."""
            if done:
                return
            done.append(True)
            reader.finish()
            tokens = reader.tokens()
            model = reader.model if reader.model is not None else row.get("model")
            # priced at the dearer of the model asked for and the model that answered
            usd = max(cost_usd(tokens, price_for(gw.prices, m)) for m in {model, row.get("model")})
            charged = "reported"
            if kind == "count":  # token counting is not billed
                tokens, usd, charged = dict.fromkeys(TOKEN_KEYS, 0), 0.0, "free"
            elif 200 <= resp.status < 300 and not reader.complete:
                # no final usage read: what the upstream bills is unknown, up to the worst case
                usd, charged = max(usd, worst), "worst case"
            gw.account(tokens, usd, worst)
            self._settled = True
            with gw._lock:
                gw.partial_calls += ended == "agent, drain cut"
                gw.worst_case_calls += charged == "worst case"
            row.update(
                model=model,
                status=resp.status,
                stream=reader.streaming,
                ended=ended,
                latency_s=round(time.time() - t0, 3),
                usage=tokens,
                usd=round(usd, 6),
                charged=charged,
                reserved_usd=round(worst, 6),
                retries=retries,
            )
            gw._write(row)

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
            conn.close()
            settle()  # before the answer's end is sent: the agent's next call sees this one settled
            if not agent_gone:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
        finally:
            conn.close()
            settle()
