#!/usr/bin/env python3
"""A fake model API for tests: Anthropic Messages (/v1/messages) and OpenAI Responses
(/v1/responses), streaming (SSE) or not, with usage in every answer, scripting a short session
for the real Claude Code and Codex CLIs.

The script is chosen by --mode and advances with the number of tool results in the request's
conversation (so the CLIs' side calls, e.g. Claude Code's title or quota requests, do not move it):

    edit    1: a shell command editing optim.py (LR 3e-3 -> 4e-3), 2: `ai4ai-proxy`, 3: a final text
    window  the edit (and a setsid orphan), then `sleep 1` on every turn, forever: the window ends it;
            after the edit each streamed answer takes ~2 s (PACED_S between its events), so the
            window's end mostly falls inside an answer whose usage the CLI never reads
    cap     like window, with large usage on every turn: the gateway's max_usd ends it
    429     the first main request is answered 429 with Retry-After: 1, then as edit
    forge   as edit, and the first command also writes a forged stdout usage line of the CLI

Every usage block it sends is appended to --report (JSON lines) and kept in `FakeAPI.reported`,
so tests compare what the harness recorded with what the API said. A request without the
expected key is answered 401 and counted in `bad_keys`.

    python tests/fake_api.py --mode edit --key KEY --report usage.jsonl [--port 0]
prints `port N` once listening.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

EDIT_CMD = (
    "python3 -c \"import re,pathlib; p=pathlib.Path('optim.py'); "
    "p.write_text(re.sub(r'^LR = 3e-3', 'LR = 4e-3', p.read_text(), flags=re.M))\" && grep -n '^LR' optim.py"
)
PROXY_CMD = "ai4ai-proxy"
SLEEP_CMD = "sleep 1; echo tick"
PACED_S = 0.4  # window mode, after the edit: seconds between a streamed answer's events
# A process that leaves the CLI's process group and session: the window's end must still end it.
ORPHAN_CMD = "(setsid bash -c 'exec -a ai4ai_test_orphan_{port} sleep 600' >/dev/null 2>&1 &) ; "
# A process of the agent writing a usage line to the CLI's own stdout (claude's result event,
# codex's turn.completed): the harness must not believe it.
FORGE_CMD = (
    "for fd in /proc/[0-9]*/fd/1; do printf '%s\\n' "
    '\'{"type":"result","subtype":"success","total_cost_usd":0.0001,"usage":{"input_tokens":1,"output_tokens":1}}\' '
    '\'{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}\' '
    "> $fd 2>/dev/null; done; true"
)


def anthropic_usage(step: int, big: bool) -> dict:
    scale = 100 if big else 1
    return {
        "input_tokens": (1000 + 10 * step) * scale,
        "cache_creation_input_tokens": 200 * scale,
        "cache_read_input_tokens": 500 * scale,
        "output_tokens": 40 + step,
    }


def openai_usage(step: int, big: bool) -> dict:
    scale = 100 if big else 1
    cached = 500 * scale
    inp = (1500 + 10 * step) * scale
    out = 60 + step
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": inp + out,
    }


class FakeAPI:
    def __init__(self, mode: str, key: str, report: Path | None = None, port: int = 0):
        self.mode, self.key, self.report = mode, key, report
        self.reported: list[dict] = []  # {"api", "model", "usage"} per answer that carried usage
        self.requests: list[dict] = []  # {"path", "model", "tools", "step", "status"}
        self.bad_keys = 0
        self.sent_429 = False
        self.lock = threading.Lock()
        api = self

        class H(Handler):
            fake = api

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeAPI:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def record(self, api: str, model: str, usage: dict) -> None:
        row = {"api": api, "model": model, "usage": usage}
        with self.lock:
            self.reported.append(row)
            if self.report:
                with open(self.report, "a") as f:
                    f.write(json.dumps(row) + "\n")

    def totals(self, prices: dict) -> tuple[dict, float]:
        """(tokens by kind, usd): what this API reported, in the gateway's terms, priced from `prices`."""
        from ai4ai.window.usage import TOKEN_KEYS, cost_usd, normalize_usage, price_for

        tot, usd = dict.fromkeys(TOKEN_KEYS, 0), 0.0
        for r in self.reported:
            t = normalize_usage(r["usage"])
            usd += cost_usd(t, price_for(prices, r["model"]))
            for k in tot:
                tot[k] += t[k]
        return tot, usd

    def pace_for(self, step: int) -> float:
        return PACED_S if self.mode == "window" and step > 0 else 0.01

    def command_for(self, step: int) -> str | None:
        """The shell command of this turn, or None for the final answer."""
        if self.mode in ("window", "cap"):
            return (ORPHAN_CMD.format(port=self.port) + EDIT_CMD) if step == 0 else SLEEP_CMD
        script = [EDIT_CMD, PROXY_CMD]
        if self.mode == "forge":
            script = [FORGE_CMD + "; " + EDIT_CMD, PROXY_CMD]
        return script[step] if step < len(script) else None


class Handler(BaseHTTPRequestHandler):
    fake: FakeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, status: int, obj: dict, headers: dict | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str, dict]], pace_s: float = 0.01) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for name, data in events:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                time.sleep(pace_s)
        except OSError:
            pass  # the client hung up mid-stream (a test of exactly that, or a run ended)

    def do_GET(self):
        path = self.path.split("?")[0]
        with self.fake.lock:
            self.fake.requests.append({"method": "GET", "path": path, "status": 200 if "/batches/" in path else 404})
        if path.startswith("/v1/messages/batches/") and path.endswith("/results"):
            return self._batch_results()
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake API: no such route"}})

    # ------------------------------------------------------------------ Anthropic Message Batches
    BATCH = 20  # requests per batch; each is billed as the API's answer says (JSON lines of results)

    def _batch_results(self):
        """The results of a batch, as the API sends them: one JSON line per request, each with its
        usage; every line is what the upstream bills."""
        lines = []
        for i in range(self.BATCH):
            usage = {"input_tokens": 20000, "cache_creation_input_tokens": 2000, "output_tokens": 500}
            self.fake.record("anthropic", "claude-sonnet-4-5", usage)
            msg = {"type": "message", "model": "claude-sonnet-4-5", "content": [], "usage": usage}
            lines.append(json.dumps({"custom_id": f"r{i}", "result": {"type": "succeeded", "message": msg}}))
        data = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/binary")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            req = {}
        path = self.path.split("?")[0]
        fake = self.fake
        if "/messages" in path:
            ok = self.headers.get("x-api-key") == fake.key
        else:
            ok = self.headers.get("Authorization") == f"Bearer {fake.key}"
        tools = [t.get("name") for t in req.get("tools") or [] if isinstance(t, dict)]
        entry = {
            "method": "POST",
            "path": path,
            "model": req.get("model"),
            "tools": tools,
            "stream": bool(req.get("stream")),
        }
        with fake.lock:
            fake.requests.append(entry)
        if not ok:
            fake.bad_keys += 1
            entry["status"] = 401
            return self._json(401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})
        if path == "/v1/messages/batches":
            entry["status"] = 200
            return self._json(200, {"id": "msgbatch_fake", "type": "message_batch", "processing_status": "ended"})
        if path.endswith("/messages/count_tokens"):
            entry["status"] = 200
            return self._json(200, {"input_tokens": 100})
        if path.endswith("/messages"):
            return self._anthropic(req, entry, tools)
        if path.endswith("/responses"):
            return self._openai(req, entry, tools)
        entry["status"] = 404
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake API: no such route"}})

    def _maybe_429(self, entry) -> bool:
        fake = self.fake
        with fake.lock:
            first = fake.mode == "429" and not fake.sent_429
            fake.sent_429 = fake.sent_429 or first
        if first:
            entry["status"] = 429
            self._json(
                429,
                {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
                {"Retry-After": "1"},
            )
        return first

    # ------------------------------------------------------------------ Anthropic Messages
    def _anthropic(self, req, entry, tools):
        fake = self.fake
        msgs = req.get("messages") or []
        step = sum(
            1
            for m in msgs
            if isinstance(m.get("content"), list)
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        main = "Bash" in tools
        entry["step"] = step if main else None
        if main and self._maybe_429(entry):
            return
        entry["status"] = 200
        model = req.get("model") or "claude-fake"
        usage = anthropic_usage(step if main else 0, big=main and fake.mode == "cap")
        cmd = fake.command_for(step) if main else None
        if cmd is not None:
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": "Bash", "input": {}}
            # Bash's own default timeout is 2 minutes; a proxy call on a loaded machine takes longer
            delta = {
                "type": "input_json_delta",
                "partial_json": json.dumps({"command": cmd, "description": "step", "timeout": 600000}),
            }
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "Done: the learning rate is changed and scored." if main else "ok"}
            stop = "end_turn"
        fake.record("anthropic", model, usage)
        if not req.get("stream"):
            content = dict(block)
            if cmd is not None:
                content["input"] = json.loads(delta["partial_json"])
            else:
                content["text"] = delta["text"]
            return self._json(
                200,
                {
                    "id": "msg_" + uuid.uuid4().hex[:20],
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [content],
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
        start_usage = dict(usage, output_tokens=1)
        self._sse(
            [
                (
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": "msg_" + uuid.uuid4().hex[:20],
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": [],
                            "stop_reason": None,
                            "stop_sequence": None,
                            "usage": start_usage,
                        },
                    },
                ),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": usage["output_tokens"]},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ],
            fake.pace_for(step) if main else 0.01,
        )

    # ------------------------------------------------------------------ OpenAI Responses
    def _openai(self, req, entry, tools):
        fake = self.fake
        items = [it for it in req.get("input") or [] if isinstance(it, dict)]
        # a step is a command issued; polls of a command still running (write_stdin) are not
        step = sum(1 for it in items if it.get("type") == "function_call" and it.get("name") != "write_stdin")
        entry["step"] = step
        outputs = [it for it in items if it.get("type") in ("function_call_output", "custom_tool_call_output")]
        running = (
            re.search(r"Process running with session ID (\d+)", str(outputs[-1].get("output"))) if outputs else None
        )
        if self._maybe_429(entry):
            return
        entry["status"] = 200
        model = req.get("model") or "gpt-fake"
        usage = openai_usage(step, big=fake.mode == "cap")
        cmd = fake.command_for(step)
        rid = "resp_" + uuid.uuid4().hex[:20]
        if running and "write_stdin" in tools:
            # codex's exec_command yields after at most 30 s with a session to poll (a proxy call
            # trains for longer): wait for it, as a model would
            item = {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:20],
                "call_id": "call_" + uuid.uuid4().hex[:20],
                "name": "write_stdin",
                "arguments": json.dumps({"session_id": int(running.group(1)), "chars": "", "yield_time_ms": 300000}),
                "status": "completed",
            }
        elif cmd is not None:
            if "exec_command" in tools:
                name, args = "exec_command", {"cmd": cmd, "yield_time_ms": 30000}
            elif "shell_command" in tools:
                name, args = "shell_command", {"command": cmd}
            else:
                name, args = "shell", {"command": ["bash", "-c", cmd]}
            item = {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:20],
                "call_id": "call_" + uuid.uuid4().hex[:20],
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": "msg_" + uuid.uuid4().hex[:20],
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "Done: the learning rate is changed and scored.", "annotations": []}
                ],
            }
        fake.record("openai", model, usage)
        done = {
            "id": rid,
            "object": "response",
            "status": "completed",
            "model": model,
            "output": [item],
            "usage": usage,
        }
        if not req.get("stream"):
            return self._json(200, done)
        self._sse(
            [
                (
                    "response.created",
                    {"type": "response.created", "response": dict(done, status="in_progress", output=[], usage=None)},
                ),
                ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
                ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
                ("response.completed", {"type": "response.completed", "response": done}),
            ],
            fake.pace_for(step),
        )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="edit", choices=["edit", "window", "cap", "429", "forge"])
    ap.add_argument("--key", required=True)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    api = FakeAPI(a.mode, a.key, a.report, a.port)
    print(f"port {api.port}", flush=True)
    try:
        api.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
