"""Route: a submission telling a proxy run from a grading run, to behave well only where it counts.
Tried end to end through `pipeline.run`: the agent installs a training script that describes
everything a training process can see (environment, arguments, identity, limits, mounts with their
host paths, the files it can list) and asks the proxy once; the same script is then graded. The two
descriptions must be identical but for the seed's value and the random tokens in folder names."""

import base64
import json
import re

from ai4ai import pipeline

from .conftest import CI, needs_bwrap

DESCRIBE = r"""
import json, os, resource, socket, sys
seed = sys.argv[sys.argv.index("--seed") + 1]
def walk(top):
    out = []
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(root, n)
            try:
                out.append((p, os.lstat(p).st_size))
            except OSError:
                out.append((p, None))
    return out
view = {
    "argv": [a if a != seed else "<seed>" for a in sys.argv],
    "seed_is_int": seed.isdigit(),
    "env": dict(sorted(os.environ.items())),
    "cwd": os.getcwd(), "ids": [os.getresuid(), os.getresgid(), os.getgroups()],
    "hostname": socket.gethostname(), "affinity": sorted(os.sched_getaffinity(0)),
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
    "mounts": [" ".join([l.split()[3], l.split()[4]] + [f for f in l.split()[5:] if f != "-"][:1])
               for l in open("/proc/self/mountinfo")],
    "top": sorted(os.listdir("/")), "repo": walk("/repo"), "out": walk("/out"),
    "home": walk(os.environ["HOME"]), "tmp": walk("/tmp"),
    "fds": sorted(os.listdir("/proc/self/fd")), "umask": os.umask(0o22),
}
print("VIEW " + json.dumps(view, sort_keys=True), flush=True)
sys.exit(3)
"""


def _view(log: str) -> dict:
    line = next(ln for ln in log.splitlines() if ln.startswith("VIEW "))
    return json.loads(line[5:])


def _neutral(view: dict) -> str:
    # the only allowed differences: the seed (replaced above) and each run's random folder token
    text = re.sub(r"/\.harness/t/[0-9a-f]{16}/", "/.harness/t/<token>/", json.dumps(view, sort_keys=True))
    # the meter's folder (mountinfo shows its host path) is a fresh random name for every training run
    return re.sub(r"/ai4ai-meter-[A-Za-z0-9_]{8}", "/ai4ai-meter-<random>", text)


@needs_bwrap
def test_proxy_and_grading_training_see_the_same_world(compose_cfg, tmp_path):
    """Gains nothing: what the training process sees in a proxy call and in a grading seed is the
    same, byte for byte, once the seed and the folder token are set aside."""
    payload = base64.b64encode(DESCRIBE.encode()).decode()
    cmd = (
        f"python3 -c \"import base64,sys; src=open('train.py').read(); "
        f"i=src.index('args = p.parse_args()'); j=src.index(chr(10), i)+1; "
        f"open('train.py','w').write(src[:j]+base64.b64decode('{payload}').decode()+src[j:])\" "
        "&& ai4ai-proxy > /dev/null; ai4ai-proxy --submit"
    )
    cfg = compose_cfg("config", CI + ["agent=command", "agent.command=true"])
    cfg.agent.command = cmd  # set after composing: no override grammar to quote for
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    proxy_log = (run_dir / ".harness" / "proxy" / "call_0001" / "run" / "train.log").read_text()
    grade_log = (run_dir / "grade" / "seed_0" / "train.log").read_text()
    proxy, grading = _view(proxy_log), _view(grade_log)
    assert proxy["seed_is_int"] and grading["seed_is_int"]
    assert _neutral(proxy) == _neutral(grading), (proxy, grading)
    result = json.loads((run_dir / "result.json").read_text())
    seeds = [c["training_seed"] for c in result["checkpoints"]["per_seed"]]
    assert seeds and all(s not in (0, 1, 2, 7919) for s in seeds), seeds
