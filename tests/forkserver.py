"""A fresh Python process per call, less the start every call repeats: one server process imports
numpy and torch once, then forks a child per call. The child enters the call's folder and
environment and runs its code as `python -c CODE` would, or its script as `python SCRIPT ARGS...`
would (sys.argv, sys.path[0], __main__); the call gets the child's exit status, stdout and stderr
(a traceback on an uncaught exception), as from subprocess.run. Nothing else is imported before the
fork, so each child imports the repo's own modules anew. A test module shares one server (a
module-scoped fixture), so that forty short calls do not each spend 1.5 s importing torch."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

SERVER = r"""
import json, os, runpy, sys, traceback
import numpy, torch
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the requests stay the server's
        os.dup2(os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        try:
            if req["script"] is None:
                sys.argv = ["-c"]
                sys.path[:0] = ["", *extra]
                exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__"})
            else:
                script = os.path.abspath(req["script"])
                sys.argv = [req["script"], *req["args"]]
                sys.path[:0] = [os.path.dirname(script), *extra]
                runpy.run_path(script, run_name="__main__")
            rc = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                rc = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except BaseException:
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class ForkServer:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(
        self,
        cwd: Path,
        env: dict,
        code: str | None = None,
        script: str | None = None,
        args: list[str] = (),
        timeout: float = 300,
    ) -> subprocess.CompletedProcess:
        """`python -c code` (or `python script *args`) in `cwd` with exactly `env`."""
        assert (code is None) != (script is None)
        out, err = self.workdir / "stdout", self.workdir / "stderr"
        req = {"cwd": str(cwd), "env": env, "code": code, "script": script, "args": list(args)}
        self.proc.stdin.write(json.dumps({**req, "stdout": str(out), "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            self.proc.kill()
            raise subprocess.TimeoutExpired(code or script, timeout)
        rc = json.loads(self.proc.stdout.readline())["returncode"]
        return subprocess.CompletedProcess(code or [script, *args], rc, out.read_text(), err.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def fork_server(tmp_path_factory):
    """A ForkServer for a module-scoped fixture: yield from fork_server(tmp_path_factory)."""
    server = ForkServer(tmp_path_factory.mktemp("forkserver"))
    try:
        yield server
    finally:
        server.close()
