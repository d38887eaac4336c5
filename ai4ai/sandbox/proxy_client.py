#!/usr/bin/env python3
"""ai4ai-proxy: ask the harness for a proxy score of the current code, or mark a submission.

    ai4ai-proxy            train your current editable files at the proxy budget (in a fresh
                           sandbox, run by the harness) and print the validation metric and
                           its position on the 0 / 0.1 / 1.0 scale
    ai4ai-proxy --submit   mark the current editable files as your submission
    ai4ai-proxy --status   time left in the window, proxy calls so far
    ai4ai-time             the seconds left in the window, as a number (also `ai4ai-proxy --time`)

Calls are served one at a time; their time counts against your window.
Standard library only: this file runs inside the agent's sandbox.
"""

import json
import os
import socket
import sys
import time


def seconds_left() -> int:
    """The harness's own count (the window grows by the time proxy calls waited for the device);
    without an answer from it, the deadline it put in the environment."""
    try:
        reply = ask("status", timeout=5)
        if reply.get("ok") and reply.get("seconds_left") is not None:
            print(max(0, int(float(reply["seconds_left"]))))
            return 0
    except (OSError, ValueError):
        pass
    deadline = os.environ.get("AI4AI_DEADLINE")
    if not deadline:
        print("ai4ai-time: AI4AI_DEADLINE is not set (not inside an agent sandbox?)", file=sys.stderr)
        return 2
    print(max(0, int(float(deadline) - time.time())))
    return 0


def ask(cmd: str, timeout: float | None = None) -> dict:
    path = os.environ.get("AI4AI_PROXY_SOCKET", "/run/ai4ai/proxy.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def main() -> int:
    args = sys.argv[1:]
    if os.path.basename(sys.argv[0]) == "ai4ai-time" or args[:1] == ["--time"]:
        return seconds_left()
    cmd = "score"
    if args and args[0] in ("--submit", "submit"):
        cmd = "submit"
    elif args and args[0] in ("--status", "status"):
        cmd = "status"
    elif args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        reply = ask(cmd)
    except OSError as e:
        path = os.environ.get("AI4AI_PROXY_SOCKET", "/run/ai4ai/proxy.sock")
        print(f"ai4ai-proxy: cannot reach the harness at {path}: {e}", file=sys.stderr)
        return 2
    except ValueError:
        print("ai4ai-proxy: malformed reply from the harness", file=sys.stderr)
        return 2
    print(json.dumps(reply, indent=1))
    return 0 if reply.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
