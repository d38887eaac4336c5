"""Network `api_only`: the agent's sandbox has no network, only a local HTTPS proxy that CONNECTs
to the configured API hosts and refuses everything else.

Harness side: `EgressProxy` serves HTTP CONNECT on a unix socket bound into the sandbox.
Sandbox side: `launcher.py --forward PORT:SOCKET` listens on 127.0.0.1:PORT inside the sandbox
(its only interface is lo) and relays each connection to that socket; the agent's CLI gets
HTTPS_PROXY=http://127.0.0.1:PORT.
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .launcher import _pipe   # the same relay runs inside the sandbox (launcher.py is stdlib-only)

MAX_HEADER = 8192


def parse_allowlist(hosts: list[str]) -> set[tuple[str, int]]:
    out = set()
    for h in hosts:
        host, _, port = str(h).rpartition(":") if ":" in str(h) else (str(h), "", "443")
        out.add((host.lower(), int(port)))
    return out


@dataclass
class EgressProxy:
    socket_path: Path
    allow: set                                   # {(host, port)}
    log: list = field(default_factory=list)      # (host, port, allowed)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(self.socket_path))
        self.socket_path.chmod(0o777)
        self._srv.listen(64)
        self._srv.settimeout(0.5)
        threading.Thread(target=self._serve, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._srv.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < MAX_HEADER:
                chunk = conn.recv(1024)
                if not chunk:
                    break
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) != 3 or line[0] != "CONNECT" or ":" not in line[1]:
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                return
            host, port = line[1].rsplit(":", 1)
            target = (host.lower().strip("[]"), int(port))
            allowed = target in self.allow
            self.log.append((target[0], target[1], allowed))
            if not allowed:
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                return
            upstream = socket.create_connection(target, timeout=30)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                upstream.sendall(rest)
            conn.settimeout(None)
            upstream.settimeout(None)
            t = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
            t.start()
            _pipe(conn, upstream)
            t.join(timeout=5)
        except (OSError, ValueError):
            try:
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            except OSError:
                pass
        finally:
            conn.close()
