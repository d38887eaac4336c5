"""What an API call cost, read from the API's own reply: `UsageReader` follows a JSON body or an SSE
stream (Anthropic Messages, OpenAI Responses and Chat Completions) as its bytes pass through the
gateway, `normalize_usage` puts each API's usage fields in one shape, and `cost_usd` prices it from
the agent config's table (`price_for`). Nothing an agent's process prints is read for cost.
"""

from __future__ import annotations

import json
import math

MAX_BODY = 32 << 20  # a request body larger than this is refused (Anthropic's own limit; no CLI sends one)
TOKEN_KEYS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")
PRICE_KEYS = {
    "input_tokens": "input",
    "cached_input_tokens": "cached_input",
    "cache_write_tokens": "cache_write",
    "output_tokens": "output",
}


def normalize_usage(usage: dict | None) -> dict:
    """One shape for every vendor's usage block. input_tokens counts every prompt token the API
    processed (uncached, cache reads and cache writes); output_tokens includes reasoning."""
    out = dict.fromkeys(TOKEN_KEYS, 0)
    if not isinstance(usage, dict):
        return out

    def num(d, k):
        v = d.get(k) if isinstance(d, dict) else None
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        return int(v) if ok else 0

    if "prompt_tokens" in usage or "completion_tokens" in usage:  # OpenAI Chat Completions
        out["input_tokens"] = num(usage, "prompt_tokens")
        out["cached_input_tokens"] = num(usage.get("prompt_tokens_details"), "cached_tokens")
        out["output_tokens"] = num(usage, "completion_tokens")
        out["reasoning_tokens"] = num(usage.get("completion_tokens_details"), "reasoning_tokens")
    elif "input_tokens_details" in usage or "output_tokens_details" in usage or "total_tokens" in usage:
        out["input_tokens"] = num(usage, "input_tokens")  # OpenAI Responses (includes cached)
        out["cached_input_tokens"] = num(usage.get("input_tokens_details"), "cached_tokens")
        out["output_tokens"] = num(usage, "output_tokens")
        out["reasoning_tokens"] = num(usage.get("output_tokens_details"), "reasoning_tokens")
    else:  # Anthropic Messages
        read, write = num(usage, "cache_read_input_tokens"), num(usage, "cache_creation_input_tokens")
        out["input_tokens"] = num(usage, "input_tokens") + read + write
        out["cached_input_tokens"] = read
        out["cache_write_tokens"] = write
        out["output_tokens"] = num(usage, "output_tokens")
        # writes to the 1-hour cache are billed at twice the input price, not the 5-minute rate
        hour = min(num(usage.get("cache_creation"), "ephemeral_1h_input_tokens"), write)
        if hour:
            out["cache_write_1h_tokens"] = hour
    return out


def _effective(table: dict) -> dict:
    """Every price of a table, the fallbacks of `cost_usd` filled in."""
    p_in = float(table.get("input") or 0.0)
    return {
        "input": p_in,
        "cached_input": float(table.get("cached_input", p_in) or 0.0),
        "cache_write": float(table.get("cache_write", p_in) or 0.0),
        "cache_write_1h": float(table.get("cache_write_1h", 2 * p_in) or 0.0),
        "output": float(table.get("output") or 0.0),
    }


def price_for(prices: dict, model: str | None) -> dict:
    """The price table of `model`: the longest key of `prices` that prefixes it; a model no key
    prefixes (or none named) is priced at the highest price of the whole table, each kind of token
    on its own (`default` included), so an unknown model never costs less than a known one."""
    best = None
    for name in prices or {}:
        if name != "default" and model and str(model).startswith(str(name)) and (best is None or len(name) > len(best)):
            best = name
    if best is not None:
        return dict(prices[best] or {})
    tables = [_effective(t) for t in (prices or {}).values() if isinstance(t, dict)]
    if not tables:
        return {}
    highest = {k: max(t[k] for t in tables) for k in tables[0]}
    if all(highest["cache_write_1h"] == 2 * t["input"] for t in tables if t["input"] == highest["input"]):
        highest.pop("cache_write_1h")  # only the default rule: keep the table in its usual shape
    return highest


def input_price(table: dict, hour: bool = True) -> float:
    """The highest price any prompt token of `table` may be billed at: plain, cached or written to
    the cache (to the 1-hour cache too when `hour`: a request asks for it by a `ttl`)."""
    kinds = ("input", "cached_input", "cache_write") + (("cache_write_1h",) if hour else ())
    return max(_effective(table)[k] for k in kinds)


def cost_usd(tokens: dict, table: dict) -> float:
    """USD of one call; prices are per million tokens. Cached and cache-write tokens are priced on
    their own (falling back to the input price) and not again as plain input."""
    p_in = float(table.get("input") or 0.0)
    uncached = tokens["input_tokens"] - tokens["cached_input_tokens"] - tokens["cache_write_tokens"]
    usd = max(uncached, 0) * p_in
    usd += tokens["cached_input_tokens"] * float(table.get("cached_input", p_in) or 0.0)
    hour = min(tokens.get("cache_write_1h_tokens", 0), tokens["cache_write_tokens"])
    usd += (tokens["cache_write_tokens"] - hour) * float(table.get("cache_write", p_in) or 0.0)
    usd += hour * float(table.get("cache_write_1h", 2 * p_in) or 0.0)
    usd += tokens["output_tokens"] * float(table.get("output") or 0.0)
    return usd / 1e6


class UsageReader:
    """Reads usage out of a response as its bytes pass: SSE events or one JSON body."""

    def __init__(self, streaming: bool):
        self.streaming = streaming
        self.model: str | None = None
        self.raw: dict = {}  # the latest vendor usage seen, merged field by field
        # the answer's final usage was seen (Anthropic's message_delta or a whole message, OpenAI's
        # response.completed / incomplete / failed or a whole response): without it, what was read
        # may be short of what the upstream bills
        self.final = False
        self.overflow = False  # more than MAX_BODY unread as one body or one line: not all read
        self._buf = bytearray()
        self._data: list[bytes] = []
        self._data_len = 0

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            if len(self._buf) + len(chunk) <= MAX_BODY:
                self._buf += chunk
            else:
                self.overflow = True
            return
        self._buf += chunk
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._buf[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                self._data_len += len(line)
                if self._data_len > MAX_BODY:
                    self.overflow, self._data, self._data_len = True, [], 0
                else:
                    self._data.append(line[5:].strip())
        del self._buf[:start]
        if len(self._buf) > MAX_BODY:
            self.overflow = True
            self._buf.clear()

    def finish(self) -> None:
        if self.streaming:
            self._dispatch()
        else:
            try:
                self._event(json.loads(bytes(self._buf)))
            except (ValueError, RecursionError):
                # not one JSON body: perhaps an event stream not labelled as one
                buf, self._buf, self.streaming = bytes(self._buf), bytearray(), True
                self.feed(buf + b"\n\n")
                self._dispatch()

    def _dispatch(self) -> None:
        data, self._data, self._data_len = b"\n".join(self._data), [], 0
        if data and data != b"[DONE]":
            try:
                self._event(json.loads(data))
            except (ValueError, RecursionError):
                pass

    def _model(self, name) -> None:
        if isinstance(name, str):  # the model that answered, as it names itself ("" included)
            self.model = name

    def _merge(self, usage) -> None:
        if isinstance(usage, dict):
            for k, v in usage.items():
                if v is not None:
                    self.raw[k] = v

    def _event(self, ev) -> None:
        if not isinstance(ev, dict):
            return
        kind = ev.get("type")
        if kind == "message_start":  # Anthropic: input usage up front
            msg = ev.get("message") if isinstance(ev.get("message"), dict) else {}
            self._model(msg.get("model"))
            self._merge(msg.get("usage"))
        elif kind == "message_delta":  # Anthropic: cumulative output so far
            self._merge(ev.get("usage"))
            self.final = self.final or _has_output(ev.get("usage"))
        elif isinstance(kind, str) and kind.startswith("response.") and isinstance(ev.get("response"), dict):
            resp = ev["response"]  # OpenAI Responses: usage at completion
            self._model(resp.get("model"))
            if isinstance(resp.get("usage"), dict) and resp["usage"]:
                self.raw = {}
                self._merge(resp["usage"])
                self.final = self.final or _has_output(resp["usage"])
        else:  # a JSON body, or a Chat Completions chunk
            self._model(ev.get("model"))
            if isinstance(ev.get("usage"), dict):
                if "prompt_tokens" in ev["usage"] or "total_tokens" in ev["usage"]:
                    self.raw = {}
                self._merge(ev["usage"])
                self.final = self.final or _has_output(ev["usage"])

    def tokens(self) -> dict:
        return normalize_usage(self.raw)

    @property
    def complete(self) -> bool:
        """The answer's final usage was read, and nothing of the answer was skipped."""
        return self.final and not self.overflow


def _has_output(usage) -> bool:
    return isinstance(usage, dict) and any(
        isinstance(usage.get(k), (int, float)) and not isinstance(usage.get(k), bool)
        for k in ("output_tokens", "completion_tokens")
    )
