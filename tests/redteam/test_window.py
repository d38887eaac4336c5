"""Route 10: the proxy starving the window. A running agent's proxy call that finds the device held
by another grading goes first once it is free (device_lock priority), and the time it waited is
given back to the agent's window: the sandbox's wall-clock limit grows by the proxy's credit."""

import sys
import threading
import time

import ai4ai.grading.devices as grade
from ai4ai.sandbox.box import Mount, Sandbox


def test_proxy_call_jumps_the_queue_of_waiting_gradings(monkeypatch, tmp_path):
    monkeypatch.setattr(grade, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    order = []

    def job(name, hold, priority):
        with grade.device_lock("cpu", 2, priority=priority):
            order.append(name)
            time.sleep(hold)

    threads = [threading.Thread(target=job, args=("holder", 0.8, False))]
    threads += [threading.Thread(target=job, args=(f"grading{i}", 0.2, False)) for i in range(3)]
    threads += [threading.Thread(target=job, args=("proxy", 0.1, True))]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=30)
    assert order[0] == "holder" and order[1] == "proxy", order


def test_lock_wait_goes_back_to_the_window(tmp_path):
    credit = {"s": 0.0}
    sb = Sandbox(
        backend="none", mounts=[Mount("/w", tmp_path)], env={"PATH": "/usr/bin:/bin"}, extend_s=lambda: credit["s"]
    )
    threading.Timer(0.3, lambda: credit.update(s=5.0)).start()  # a proxy call waited 5 s for the device
    out = sb.run(
        [sys.executable, "-c", "import time; time.sleep(2); print('done')"],
        "/w",
        1.0,
        tmp_path / "log.txt",
        grace_s=0.5,
    )
    assert not out.timed_out and out.returncode == 0 and "done" in (tmp_path / "log.txt").read_text()
    sb.extend_s = None
    out = sb.run([sys.executable, "-c", "import time; time.sleep(2)"], "/w", 1.0, tmp_path / "log2.txt", grace_s=0.5)
    assert out.timed_out
