"""Issue 39: every served method of every task's meter, fuzzed against its real server.

Random arguments (arrays of every dtype the wire carries, of random shapes, signs and sizes;
ints, floats, bools, lists, nested lists, strings, None; extra keyword arguments) go to each
served method. Whatever the meter answers, the invariant holds: the wire's count never passes
the budget and never goes down, it grows by exactly what was returned (rows of the reply, the
teacher's non-pad tokens, a batch's live episodes) and by nothing for a refused request, and the
meter's memory stays bounded. Not particular messages: what was served against what was charged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_meter_budget import metered, peak_rss_mib, server_pid

EXAMPLES = 60
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


@st.composite
def arrays(draw, near: int = 64):
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.sampled_from([0, 1, 2, 3, 5, 8, 64, near, 4097])) for _ in range(ndim))
    if int(np.prod(shape)) > 1 << 16:
        shape = shape[:1]
    lo, hi = draw(st.sampled_from([(0, 2), (0, 4), (0, near), (-3, 3), (-(1 << 30), 1 << 30), (near - 1, near + 2)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = rng.integers(lo, hi, size=shape, endpoint=False)
    if dtype.startswith("float"):
        a = a + rng.random(shape) * draw(st.sampled_from([0.0, 0.5]))
    with np.errstate(over="ignore"):
        a = np.asarray(a).astype(dtype)
    return torch.from_numpy(a) if draw(st.booleans()) and dtype != "uint16" else a


def values(near: int = 64):
    scalars = st.one_of(
        st.integers(-(1 << 40), 1 << 40),
        st.integers(-3, 300),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.text(max_size=4),
    )
    lists = st.lists(st.integers(-5, near + 5), max_size=8)
    return st.one_of(
        arrays(near),
        scalars,
        lists,
        st.lists(lists, max_size=3),
        st.tuples(st.integers(0, 4), st.integers(0, 4)),
    )


def wire(conn, obj) -> dict:
    return conn.call({"op": "count", "ref": object.__getattribute__(obj, "_ref")})


def first_array(value):
    if isinstance(value, (tuple, list)):
        return first_array(value[0]) if value else None
    return value if isinstance(value, (torch.Tensor, np.ndarray)) else None


def _nonpad(x) -> int:
    return int((np.asarray(x) != 0).sum())


def _legit(method: str, obj) -> tuple:
    """A well-formed request of each kind, mixed in so that budgets are spent too."""
    return {
        "get": lambda: (torch.randint(0, max(1, len(obj)), (int(np.random.randint(1, 40)),)),),
        "get_forget": lambda: (torch.randint(0, 100, (int(np.random.randint(1, 40)),)),),
        "get_retain": lambda: (torch.randint(0, 100, (int(np.random.randint(1, 40)),)),),
        "generate": lambda: (torch.randint(0, 20, (int(np.random.randint(1, 6)), 15)),),
        "logits": lambda: (torch.randint(0, 20, (int(np.random.randint(1, 6)), 20)),),
        "rewards": lambda: (torch.randn(n := int(np.random.randint(1, 20)), 64), torch.randint(0, 10, (n,))),
        "rewards_and_grads": lambda: (torch.randn(n := int(np.random.randint(1, 20)), 64), torch.randint(0, 10, (n,))),
    }[method]()


SERVED = {  # task: (class, construct args, methods, per-row rule)
    "optimizer": ("data.TrainingSplit", ("ci",), ["get"], "rows"),
    "sft": ("data.TrainingSplit", ("ci",), ["get"], "rows"),
    "dpo": ("data.PairSplit", ("ci",), ["get"], "rows"),
    "reward_model": ("data.PreferencePairs", ("ci",), ["get"], "rows"),
    "pruning": ("data.CalibrationSplit", ("ci",), ["get"], "rows"),
    "graph_diffusion": ("data.TrainingGraphs", ("ci",), ["get"], "rows"),
    "unlearning": ("data.UnlearningData", ("ci",), ["get_forget", "get_retain"], "rows"),
    "distillation": ("teacher.Teacher", ("ci", "cpu"), ["generate", "logits"], "tokens"),
    "diffusion_rl": ("env.Judge", ("ci",), ["rewards", "rewards_and_grads"], "rows"),
}


def _fuzz_calls(conn, obj, methods: list, rule: str, budget: int):
    seen = {"delivered": 0}

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        method=st.sampled_from(methods),
        legit=st.integers(0, 3),
        args=st.lists(values(), max_size=3),
        kwargs=st.dictionaries(
            st.sampled_from(["idx", "x", "prompts", "tokens", "extra", "return_logits"]), values(), max_size=2
        ),
    )
    def probe(method, legit, args, kwargs):
        if legit == 0:
            args, kwargs = list(_legit(method, obj)), {}
        before = wire(conn, obj)
        try:
            got = getattr(obj, method)(*args, **kwargs)
            ok = True
        except Exception:
            ok = False
        after = wire(conn, obj)
        delta = after["delivered"] - before["delivered"]
        assert 0 <= after["served"] <= after["budget"] == budget, after
        assert delta >= 0 and after["delivered"] >= seen["delivered"], (before, after)
        seen["delivered"] = after["delivered"]
        if not ok:
            assert delta == 0, (method, args, kwargs, before, after)
            return
        out = first_array(got)
        assert out is not None
        if rule == "rows":
            assert delta == out.shape[0], (method, delta, tuple(out.shape))
            first = args[0] if args else kwargs.get("idx", kwargs.get("x"))
            # one row per index / image asked; a 0-d index crosses as one index (the client's encoder
            # sends at least 1-D, np.ascontiguousarray), checked and counted as such on the wire
            assert (1 if np.ndim(first) == 0 else len(first)) == delta, (method, args, kwargs, delta)
            assert max(np.asarray(first).ndim, 1) == (2 if method.startswith("rewards") else 1)
        else:
            sent = args[0] if args else kwargs.get("prompts", kwargs.get("tokens"))
            expect = _nonpad(sent) + (_nonpad(out) if method == "generate" else 0)
            assert delta == expect, (method, delta, expect)

    probe()


@pytest.mark.parametrize("name", sorted(SERVED))
def test_fuzzed_requests_never_get_more_than_the_wire_counts(tmp_path, name):
    cls, construct, methods, rule = SERVED[name]
    with metered(tmp_path, name) as (conn, report):
        obj = conn.call({"op": "new", "cls": cls}, construct)
        budget = int(wire(conn, obj)["budget"])
        pid = server_pid(conn)
        base = peak_rss_mib(pid)
        _fuzz_calls(conn, obj, methods, rule, budget)
        assert peak_rss_mib(pid) - base < 400, (base, peak_rss_mib(pid))


def test_fuzzed_episodes_never_get_more_than_the_wire_counts(tmp_path):
    """agentic_rl: sample_levels, reset and step with random arguments; every live episode's step
    is counted once, refused requests count nothing, and the count stays within the budget."""
    with metered(tmp_path, "agentic_rl") as (conn, report):
        env = conn.call({"op": "new", "cls": "env.TrainingEnv"}, ("ci", 5))
        budget = int(wire(conn, env)["budget"])
        levels = env.sample_levels(16)
        batches = [env.reset(levels)]

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(
            what=st.sampled_from(["sample", "reset", "step", "step", "legit_step"]),
            arg=values(near=16),
            extra=st.dictionaries(st.sampled_from(["n", "levels", "actions", "extra"]), values(), max_size=1),
            k=st.integers(0, 3),
        )
        def probe(what, arg, extra, k):
            before = wire(conn, env)
            b = batches[k % len(batches)]
            live = int((~np.asarray(b.done)).sum())
            try:
                if what == "sample":
                    env.sample_levels(arg, **extra)
                elif what == "reset":
                    batches.append(env.reset(arg if k else levels, **extra))
                elif what == "step":
                    b.step(arg, **extra)
                else:
                    b.step(torch.randint(0, 4, (len(b),)))
                ok = True
            except Exception:
                ok = False
            after = wire(conn, env)
            assert 0 <= after["delivered"] <= after["served"] <= after["budget"] == budget, after
            delta = after["delivered"] - before["delivered"]
            if not ok or what in ("sample", "reset"):
                assert delta == 0, (what, arg, before, after)
            else:
                assert delta == live, (what, delta, live)
            if not ok and what != "legit_step":
                assert after["served"] == before["served"], (what, arg, before, after)

        probe()


def test_a_zero_d_index_crosses_as_one_index(tmp_path):
    """Found by the fuzzer above: optimizer's get(np.array(1, dtype=int16)). The client's encoder sends
    at least 1-D, so one index crosses; the wire checks it against the declared 1-D signature, counts
    one row and returns one row, exactly as for get(np.array([1]))."""
    cls, construct, _, _ = SERVED["optimizer"]
    with metered(tmp_path, "optimizer") as (conn, _report):
        obj = conn.call({"op": "new", "cls": cls}, construct)
        for index in (np.array(1, dtype=np.int16), np.array([1], dtype=np.int16)):
            before = wire(conn, obj)["delivered"]
            out = first_array(obj.get(index))
            assert tuple(out.shape)[0] == 1 and wire(conn, obj)["delivered"] - before == 1
