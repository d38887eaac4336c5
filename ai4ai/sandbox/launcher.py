#!/usr/bin/env python3
"""ai4ai-launch: runs inside the agent's sandbox. Optionally relays 127.0.0.1:PORT to a unix
socket (the harness's API gateway, ai4ai/window/gateway.py), then runs the agent's command and returns
its exit code. Standard library only.

    ai4ai-launch [--forward PORT:SOCKET] -- COMMAND...
"""

import socket
import subprocess
import sys
import threading


def _pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _listen(port: int) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    return srv


def _relay(srv: socket.socket, path: str) -> None:
    while True:
        conn, _ = srv.accept()
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(path)
        except OSError:
            conn.close()
            continue
        threading.Thread(target=_pipe, args=(conn, up), daemon=True).start()
        threading.Thread(target=_pipe, args=(up, conn), daemon=True).start()


def main(argv):
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    opts, cmd = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    if len(opts) == 2 and opts[0] == "--forward":
        port, path = opts[1].split(":", 1)
        srv = _listen(int(port))  # listening before the command starts
        threading.Thread(target=_relay, args=(srv, path), daemon=True).start()
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
