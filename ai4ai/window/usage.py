"""What an API call cost, read from the API's own reply: `UsageReader` follows a JSON body or an SSE
stream (Anthropic Messages, OpenAI Responses and Chat Completions) as its bytes pass through the
gateway, `normalize_usage` puts each API's usage fields in one shape, and `cost_usd` prices it from
the agent config's table (`price_for`). Nothing an agent's process prints is read for cost.
"""

from __future__ import annotations

import json

MAX_BODY = 64 << 20  # a request body larger than this is refused (no CLI sends one)
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
        return int(v) if isinstance(v, (int, float)) and v >= 0 else 0

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
    return out


def price_for(prices: dict, model: str | None) -> dict:
    """The price table of `model`: the longest key of `prices` that prefixes it, else `default`."""
    best = None
    for name in prices or {}:
        if name != "default" and model and str(model).startswith(str(name)) and (best is None or len(name) > len(best)):
            best = name
    return dict((prices or {}).get(best or "default") or {})


def cost_usd(tokens: dict, table: dict) -> float:
    """USD of one call; prices are per million tokens. Cached and cache-write tokens are priced on
    their own (falling back to the input price) and not again as plain input."""
    p_in = float(table.get("input") or 0.0)
    uncached = tokens["input_tokens"] - tokens["cached_input_tokens"] - tokens["cache_write_tokens"]
    usd = max(uncached, 0) * p_in
    usd += tokens["cached_input_tokens"] * float(table.get("cached_input", p_in) or 0.0)
    usd += tokens["cache_write_tokens"] * float(table.get("cache_write", p_in) or 0.0)
    usd += tokens["output_tokens"] * float(table.get("output") or 0.0)
    return usd / 1e6


class UsageReader:
    """Reads usage out of a response as its bytes pass: SSE events or one JSON body."""

    def __init__(self, streaming: bool):
        self.streaming = streaming
        self.model: str | None = None
        self.raw: dict = {}  # the latest vendor usage seen, merged field by field
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            if len(self._buf) < MAX_BODY:
                self._buf += chunk
            return
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            line = line.rstrip(b"\r")
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                self._data.append(line[5:].strip())

    def finish(self) -> None:
        if self.streaming:
            self._dispatch()
        else:
            try:
                self._event(json.loads(self._buf))
            except ValueError:
                pass

    def _dispatch(self) -> None:
        data, self._data = b"\n".join(self._data), []
        if data and data != b"[DONE]":
            try:
                self._event(json.loads(data))
            except ValueError:
                pass

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
            msg = ev.get("message") or {}
            self.model = msg.get("model") or self.model
            self._merge(msg.get("usage"))
        elif kind == "message_delta":  # Anthropic: cumulative output so far
            self._merge(ev.get("usage"))
        elif isinstance(kind, str) and kind.startswith("response.") and isinstance(ev.get("response"), dict):
            resp = ev["response"]  # OpenAI Responses: usage at completion
            self.model = resp.get("model") or self.model
            if resp.get("usage"):
                self.raw = {}
                self._merge(resp["usage"])
        else:  # a JSON body, or a Chat Completions chunk
            self.model = ev.get("model") or self.model
            if isinstance(ev.get("usage"), dict):
                if "prompt_tokens" in ev["usage"] or "total_tokens" in ev["usage"]:
                    self.raw = {}
                self._merge(ev["usage"])

    def tokens(self) -> dict:
        return normalize_usage(self.raw)
