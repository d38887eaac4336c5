"""The meter: a task's budgeted resources, served to training from a process outside its sandbox.

A training run's protected interface (a repo's `data.TrainingSplit`, `teacher.Teacher`,
`env.TrainingEnv`, ...) holds the data, the teacher or the level generator, and counts what it
hands out. Inside the process that trains, that count is only as good as the submission's
restraint: its code can read the split file or the teacher's weights directly. So in a graded
run those classes live in a separate process, the meter server, which runs the repo's own
(pristine) protected code next to the files the training copy no longer holds, and answers
over a unix socket bound into the training sandbox. The repo's module swaps the class for
`remote(cls)` when `AI4AI_METER` names that socket; the API is the same, only where the
object lives changes.

This file has no ai4ai imports: the harness runs it as the server (`python meter_wire.py serve
...`) and binds it into the training sandbox as the module `ai4ai_meter`, which the repos import.
That is also why it is one file of over 500 lines: the wire, the server and the client must
travel together as a single module, and splitting them would put a second file in every sandbox.

The wire, both ways: one frame = 8-byte little-endian length, 4-byte header length, a JSON
header, then the raw bytes of the arrays it names. Values are JSON, with tagged objects for
what JSON lacks: {"$a": i, "dtype", "shape", "torch"} an array (buffer i), {"$t": [...]} a
tuple, {"$d": {...}} a dict, {"$v": "module.Class", "f": {...}} a dataclass value the spec
allows, {"$r": id} an object that stays on the server. Nothing is unpickled, evaluated or
imported by name from a request: the server resolves classes only from its own spec.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import socket
import struct
import sys
import threading

MAX_FRAME = 64 << 20  # bytes of one frame, either way (a batch of teacher logits is a few MB)
MAX_CONNECTIONS = 8  # open at once (a training process and its forked workers)
MAX_DEPTH = 16  # nesting of a decoded value
MAX_ITEMS = 1 << 16  # list items, dict keys or arrays in one frame
MAX_OBJECTS = 256  # objects (e.g. a batch of episodes) kept per class; the oldest go first
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
ENV = "AI4AI_METER"  # the socket's path inside the training sandbox


class MeterError(RuntimeError):
    """The meter refused a request (not a budget: the repo's own exceptions carry those)."""


# ------------------------------------------------------------------------------------ frames


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the meter's peer closed the connection")
        buf += chunk
    return bytes(buf)


def send_frame(sock: socket.socket, header: dict, buffers: list) -> None:
    head = json.dumps(header, allow_nan=True).encode()
    total = 4 + len(head) + sum(len(b) for b in buffers)
    if total > MAX_FRAME:
        raise MeterError(f"a meter frame of {total} bytes is over the limit of {MAX_FRAME}")
    sock.sendall(struct.pack("<QI", total, len(head)) + head)
    for b in buffers:
        sock.sendall(b)


def recv_frame(sock: socket.socket) -> tuple[dict, list]:
    total, hlen = struct.unpack("<QI", _recv_exact(sock, 12))
    if total > MAX_FRAME or hlen > total - 4:
        raise MeterError(f"a meter frame of {total} bytes (header {hlen}) is over the limit")
    header = json.loads(_recv_exact(sock, hlen))
    body = _recv_exact(sock, total - 4 - hlen)
    if not isinstance(header, dict):
        raise MeterError("a meter frame's header is not an object")
    buffers, at = [], 0
    for n in header.get("buffers", []):
        if not isinstance(n, int) or n < 0 or at + n > len(body):
            raise MeterError("a meter frame's buffers do not add up")
        buffers.append(body[at : at + n])
        at += n
    if at != len(body) or len(buffers) > MAX_ITEMS:
        raise MeterError("a meter frame's buffers do not add up")
    return header, buffers


# ------------------------------------------------------------------------------------ values


class _Codec:
    """Encodes and decodes values; `values` maps "module.Class" to the dataclasses allowed as values,
    `ref_of` / `obj_of` turn server-side objects into ids and back (None: no objects here)."""

    def __init__(self, values: dict, ref_of=None, obj_of=None):
        self.values, self.ref_of, self.obj_of = values, ref_of, obj_of

    def encode(self, value, buffers: list, depth: int = 0):
        if depth > MAX_DEPTH:
            raise MeterError("a value nested too deeply for the meter")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        np = sys.modules.get("numpy")
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            arr = value.detach().cpu().contiguous().numpy()
            return self._array(arr, True, buffers)
        if np is not None and isinstance(value, np.ndarray):
            return self._array(np.ascontiguousarray(value), False, buffers)
        if np is not None and isinstance(value, np.generic):
            return value.item()
        if isinstance(value, tuple):
            return {"$t": [self.encode(v, buffers, depth + 1) for v in value]}
        if isinstance(value, list):
            return [self.encode(v, buffers, depth + 1) for v in value]
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise MeterError("the meter carries dicts with string keys only")
            return {"$d": {k: self.encode(v, buffers, depth + 1) for k, v in value.items()}}
        name = f"{type(value).__module__}.{type(value).__qualname__}"
        if name in self.values and dataclasses.is_dataclass(value):
            return {
                "$v": name,
                "f": {
                    f.name: self.encode(getattr(value, f.name), buffers, depth + 1) for f in dataclasses.fields(value)
                },
            }
        if isinstance(value, Remote):
            return {"$r": object.__getattribute__(value, "_ref")}
        if self.ref_of is not None:
            ref = self.ref_of(value)
            if ref is not None:
                return {"$r": ref, "cls": name}
        raise MeterError(f"the meter cannot carry a {name}")

    @staticmethod
    def _array(arr, is_torch: bool, buffers: list) -> dict:
        if arr.dtype.name not in DTYPES:
            raise MeterError(f"the meter carries arrays of {', '.join(DTYPES)}, not {arr.dtype.name}")
        buffers.append(arr.tobytes())
        return {"$a": len(buffers) - 1, "dtype": arr.dtype.name, "shape": list(arr.shape), "torch": is_torch}

    def decode(self, value, buffers: list, depth: int = 0):
        if depth > MAX_DEPTH:
            raise MeterError("a value nested too deeply for the meter")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            if len(value) > MAX_ITEMS:
                raise MeterError("a list too long for the meter")
            return [self.decode(v, buffers, depth + 1) for v in value]
        if not isinstance(value, dict) or len(value) == 0:
            raise MeterError("a malformed value in a meter frame")
        if "$a" in value:
            return self._decode_array(value, buffers)
        if "$t" in value and isinstance(value["$t"], list):
            return tuple(self.decode(v, buffers, depth + 1) for v in value["$t"])
        if "$d" in value and isinstance(value["$d"], dict):
            return {str(k): self.decode(v, buffers, depth + 1) for k, v in value["$d"].items()}
        if "$v" in value:
            cls = self.values.get(value["$v"])
            fields = value.get("f")
            if cls is None or not isinstance(fields, dict):
                raise MeterError(f"the meter does not carry values of {value['$v']!r}")
            names = {f.name for f in dataclasses.fields(cls)}
            if set(fields) != names:
                raise MeterError(f"a {value['$v']} needs exactly the fields {sorted(names)}")
            return cls(**{k: self.decode(v, buffers, depth + 1) for k, v in fields.items()})
        if "$r" in value and isinstance(value["$r"], int) and not isinstance(value["$r"], bool):
            if self.obj_of is None:
                raise MeterError("a meter reference where none can be")
            return self.obj_of(value["$r"], value.get("cls"))
        raise MeterError("a malformed value in a meter frame")

    @staticmethod
    def _decode_array(value: dict, buffers: list):
        import numpy as np

        i, dtype, shape = value.get("$a"), value.get("dtype"), value.get("shape")
        if (
            not isinstance(i, int)
            or not 0 <= i < len(buffers)
            or dtype not in DTYPES
            or not isinstance(shape, list)
            or len(shape) > 8
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise MeterError("a malformed array in a meter frame")
        raw = buffers[i]
        n = 1
        for d in shape:
            n *= d
        if n * np.dtype(dtype).itemsize != len(raw):
            raise MeterError("an array's shape does not match its bytes")
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        if value.get("torch"):
            import torch

            return torch.from_numpy(arr)
        return arr


# ------------------------------------------------------------------------------------ client


class _Connection:
    """One socket per process (a forked child opens its own)."""

    _lock = threading.Lock()
    _conn: _Connection | None = None

    def __init__(self, path: str):
        self.pid = os.getpid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError as e:
            raise MeterError(
                f"cannot reach the meter at {path} ({e}): a graded run's budgeted data is "
                "served from outside the training process; run training through the harness"
            ) from e
        self.io = threading.Lock()
        header, buffers = self.request({"op": "hello"})
        self.spec = header["spec"]
        self.codec = _Codec(_value_classes(self.spec.get("values", [])))

    @classmethod
    def get(cls) -> _Connection:
        with cls._lock:
            if cls._conn is None or cls._conn.pid != os.getpid():
                path = os.environ.get(ENV)
                if not path:
                    raise MeterError(f"{ENV} is not set: no meter to reach")
                cls._conn = _Connection(path)
            return cls._conn

    def request(self, header: dict, buffers: list | None = None) -> tuple[dict, list]:
        with self.io:
            send_frame(self.sock, {**header, "buffers": [len(b) for b in (buffers or [])]}, buffers or [])
            reply, out = recv_frame(self.sock)
        if "error" in reply:
            _raise(reply["error"])
        return reply, out

    def call(self, header: dict, args: tuple = (), kwargs: dict | None = None):
        buffers: list = []
        enc = {
            "args": [self.codec.encode(a, buffers) for a in args],
            "kwargs": {k: self.codec.encode(v, buffers) for k, v in (kwargs or {}).items()},
        }
        reply, out = self.request({**header, **enc}, buffers)
        return self._value(reply.get("value"), out)

    def _value(self, value, out):
        codec = _Codec(self.codec.values, obj_of=lambda ref, cls: Remote._wrap(self, ref, cls))
        return codec.decode(value, out)


def _value_classes(names) -> dict:
    out = {}
    for name in names:
        mod, _, qual = name.rpartition(".")
        out[name] = getattr(importlib.import_module(mod), qual)
    return out


def _raise(err: dict):
    """Raise the repo's own exception (e.g. data.BudgetExhausted) when the server names one."""
    kind, mod, msg = err.get("type", "MeterError"), err.get("module", ""), err.get("message", "")
    cls = None
    if mod and mod in sys.modules:
        cls = getattr(sys.modules[mod], kind, None)
    if mod == "builtins" and kind in ("ValueError", "IndexError", "TypeError", "KeyError"):
        cls = getattr(__import__("builtins"), kind)
    if isinstance(cls, type) and issubclass(cls, Exception):
        raise cls(msg)
    raise MeterError(f"{kind}: {msg}")


class Remote:
    """A served object: its declared methods and attributes, each a round trip to the meter."""

    __slots__ = ("_conn", "_ref", "_cls")

    @staticmethod
    def _wrap(conn: _Connection, ref: int, cls: str | None) -> Remote:
        spec = conn.spec["classes"].get(cls or "")
        if spec is None:
            raise MeterError(f"the meter returned an object of an unknown class {cls!r}")
        r = object.__new__(Remote)
        for k, v in (("_conn", conn), ("_ref", ref), ("_cls", cls)):
            object.__setattr__(r, k, v)
        return r

    def _spec(self) -> dict:
        return self._conn.spec["classes"][self._cls]

    def __getattr__(self, name: str):
        spec = self._spec()
        if name in spec["methods"]:
            conn, ref = self._conn, self._ref
            return lambda *a, **k: conn.call({"op": "call", "ref": ref, "name": name}, a, k)
        if name in spec["attributes"]:
            return self._conn.call({"op": "get", "ref": self._ref, "name": name})
        raise AttributeError(
            f"{self._cls}.{name} is not served by the meter (served: "
            f"{', '.join(sorted([*spec['methods'], *spec['attributes']]))})"
        )

    def __setattr__(self, name, value):
        raise AttributeError(f"{self._cls} is served by the meter; its attributes cannot be set")

    def __len__(self) -> int:
        if not self._spec().get("len"):
            raise TypeError(f"{self._cls} has no len() on the meter")
        return self._conn.call({"op": "len", "ref": self._ref})

    def __repr__(self) -> str:
        return f"<{self._cls} served by the meter>"


def remote(cls):
    """`cls` served by the meter when AI4AI_METER is set, else `cls` itself. Calling the result
    constructs the one object of that class on the server (the same arguments give the same
    object, so a run has one budget however often it asks)."""
    if not os.environ.get(ENV):
        return cls
    name = f"{cls.__module__}.{cls.__qualname__}"

    def construct(*args, **kwargs):
        conn = _Connection.get()
        return conn.call({"op": "new", "cls": name}, args, kwargs)

    construct.__name__, construct.__qualname__, construct.__doc__ = cls.__name__, cls.__qualname__, cls.__doc__
    construct.served_by_meter = True
    return construct


# ------------------------------------------------------------------------------------ signatures
#
# Every served method has a declared signature, checked on the decoded request before the repo's
# method runs, and a count rule: what its reply is worth in the unit of the object's budget. The
# server, not the repo's class, keeps that count (a `Ledger` per constructed object, its budget read
# once when the object is built) and refuses a request whose reply would take it past the budget.
#
# An argument's spec (one key names its kind):
#   {int: [lo, hi]}                    a Python int (not a bool) in [lo, hi] (None: unbounded)
#   {bool: true}                       a bool
#   {tensor: [dtypes], ndim, shape, rows, rows_as, range}
#                                      a torch tensor or numpy array of one of `dtypes` with `ndim`
#                                      dimensions; `shape`: per dimension an exact size, None, or an
#                                      inclusive [lo, hi]; `rows`: at most this many along the first;
#                                      `rows_as`: as many as that (earlier) argument; `range`: every
#                                      value in [lo, hi) (integers) or [lo, hi] (floats)
#   {value: "module.Class", fields: {name: spec}}   a dataclass the spec allows, field by field
# and `default` (any value) makes it optional. A bound is a number, None, "@a.b" (an attribute of
# the served object, "@len" its len(), read once) "=module.NAME" (a constant of the repo's module)
# or "$remaining" (what is left of the budget, now).
# Count rules: "free"; {rows: arg} the rows of `arg`, and every array of the reply has as many;
# {tokens: [args], pad, per_row, reply} the non-`pad` elements of `args` (+ `per_row` x their rows
# asked in the worst case), then of the reply's array number `reply`; {prepay: arg, per: bound}
# `arg` x `per`, reserved (levels that prepay their episodes); {claim: arg} a reset that spends
# what was reserved for those levels; "steps" one per episode not yet done, per step call.

INTS = ("uint8", "int8", "int16", "int32", "int64")


def _dtype_name(x) -> str:
    d = x.dtype
    return d.name if hasattr(d, "name") else str(d).removeprefix("torch.")


def _is_array(x) -> bool:
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    return (np is not None and isinstance(x, np.ndarray)) or (torch is not None and isinstance(x, torch.Tensor))


def _numpy(x):
    torch = sys.modules.get("torch")
    return x.numpy() if torch is not None and isinstance(x, torch.Tensor) else x


def _arrays(value) -> list:
    if _is_array(value):
        return [value]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays(v)]
    return []


def describe(name: str, sig: dict, bound=lambda b: b) -> str:
    """`name(arg: what, ...)`, for a refusal's message (`bound` resolves the declared bounds)."""

    def b(x):
        try:
            return [b(y) for y in x] if isinstance(x, list) else bound(x)
        except Exception:
            return x

    def one(spec):
        if "int" in spec:
            return f"int in [{b(spec['int'][0])}, {b(spec['int'][1])}]"
        if "bool" in spec:
            return "bool"
        if "value" in spec:
            return f"{spec['value']}({', '.join(f'{k}: {one(v)}' for k, v in spec.get('fields', {}).items())})"
        out = f"tensor of {'|'.join(spec['tensor'])}, {spec['ndim']}-D"
        if spec.get("shape"):
            out += f" shape {b(spec['shape'])}"
        if spec.get("rows") is not None:
            out += f", at most {b(spec['rows'])} rows"
        if spec.get("rows_as"):
            out += f", as many rows as {spec['rows_as']}"
        if spec.get("range"):
            out += f", values in [{b(spec['range'][0])}, {b(spec['range'][1])})"
        return out

    args = ", ".join(
        f"{k}: {one(v)}" + (f" = {v['default']!r}" if "default" in v else "") for k, v in sig["args"].items()
    )
    return f"{name}({args})"


class Ledger:
    """What the wire has served from one constructed object, in the unit of its budget: `served`
    only grows; `reserved` is held for prepaid episodes (spent as steps, or released unplayed)."""

    def __init__(self, unit: str, budget: int):
        self.unit, self.budget, self.served, self.reserved = unit, budget, 0, 0
        self.prepaid: dict[bytes, int] = {}  # level -> prepaid copies (each `per` steps)

    @property
    def remaining(self) -> int:
        return self.budget - self.served - self.reserved

    def report(self) -> dict:
        charged = self.served + self.reserved
        return {
            "unit": self.unit,
            "budget": self.budget,
            "served": charged,
            "remaining": self.budget - charged,
            "delivered": self.served,
            "reserved": self.reserved,
        }


class _Signed:
    """Checks one request against a method's signature; `bound(x)` resolves a declared bound."""

    def __init__(self, qual: str, sig: dict, bound):
        self.qual, self.sig, self.bound = qual, sig, bound

    def refuse(self, why: str):
        raise MeterError(f"{why}; the meter serves {describe(self.qual, self.sig, self.bound)}")

    def bind(self, args: list, kwargs: dict) -> dict:
        names = list(self.sig["args"])
        if len(args) > len(names):
            self.refuse(f"{len(args)} positional arguments")
        got = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in self.sig["args"]:
                self.refuse(f"no argument {k!r}")
            if k in got:
                self.refuse(f"{k!r} given twice")
            got[k] = v
        for k in names:
            if k not in got and "default" not in self.sig["args"][k]:
                self.refuse(f"{k!r} missing")
        for k in names:
            if k in got:
                self.check(k, self.sig["args"][k], got[k], got)
        return got

    def check(self, where: str, spec: dict, v, scope: dict) -> None:
        if "int" in spec:
            lo, hi = (self.bound(b) for b in spec["int"])
            if type(v) is not int or (lo is not None and v < lo) or (hi is not None and v > hi):
                self.refuse(f"{where} is {_short(v)}, not an int in [{lo}, {hi}]")
        elif "bool" in spec:
            if type(v) is not bool:
                self.refuse(f"{where} is {_short(v)}, not a bool")
        elif "value" in spec:
            cls = _resolve_class(spec["value"])
            if type(v) is not cls:
                self.refuse(f"{where} is {_short(v)}, not a {spec['value']}")
            fields = {k: getattr(v, k) for k in spec.get("fields", {})}
            for k, fspec in spec.get("fields", {}).items():
                self.check(f"{where}.{k}", fspec, fields[k], fields)
        else:
            self.check_array(where, spec, v, scope)

    def check_array(self, where: str, spec: dict, v, scope: dict) -> None:
        if not _is_array(v):
            self.refuse(f"{where} is {_short(v)}, not a tensor")
        dtype = _dtype_name(v)
        if dtype not in spec["tensor"]:
            self.refuse(f"{where} is a tensor of {dtype}")
        shape = tuple(v.shape)
        if len(shape) != spec["ndim"]:
            self.refuse(f"{where} has shape {list(shape)}")
        for d, want in zip(shape, spec.get("shape") or [None] * len(shape)):
            if isinstance(want, list):
                lo, hi = (self.bound(b) for b in want)
                ok = (lo is None or d >= lo) and (hi is None or d <= hi)
            else:
                want = self.bound(want)
                ok = want is None or d == want
            if not ok:
                self.refuse(f"{where} has shape {list(shape)}")
        rows = self.bound(spec.get("rows"))
        if rows is not None and shape and shape[0] > rows:
            self.refuse(f"{where} has {shape[0]} rows, over the {rows} this request may ask")
        other = spec.get("rows_as")
        if other is not None and (
            other not in scope or not _is_array(scope[other]) or shape[:1] != tuple(scope[other].shape[:1])
        ):
            self.refuse(f"{where} has shape {list(shape)}, not as many rows as {other}")
        if spec.get("range") is not None and _numel(v) > 0:
            lo, hi = (self.bound(b) for b in spec["range"])
            a = _numpy(v)
            if dtype.startswith("float"):
                finite = bool((a == a).all()) and (lo is None or a.min() >= lo) and (hi is None or a.max() <= hi)
                if not finite:
                    self.refuse(f"{where} has values outside [{lo}, {hi}]")
            elif (lo is not None and a.min() < lo) or (hi is not None and a.max() >= hi):
                self.refuse(f"{where} has values outside [{lo}, {hi})")


def _numel(v) -> int:
    n = 1
    for d in v.shape:
        n *= int(d)
    return n


def _short(v) -> str:
    if _is_array(v):
        return f"a tensor of {_dtype_name(v)} shape {list(v.shape)}"
    r = repr(v)
    return f"a {type(v).__name__} {r[:40]}"


def _resolve_class(name: str):
    mod, _, qual = name.rpartition(".")
    return getattr(importlib.import_module(mod), qual)


def _nonpad(v, pad) -> int:
    return int((_numpy(v) != pad).sum())


def _level_keys(levels) -> list[bytes]:
    """One key per level (env.Levels: walls, targets, boxes, player), as the repo keys its prepaid
    episodes (equal levels, equal keys)."""
    np = sys.modules["numpy"]
    w, t, b, p = (np.asarray(_numpy(getattr(levels, f))) for f in ("walls", "targets", "boxes", "player"))
    return [
        w[i].tobytes() + t[i].tobytes() + b[i].tobytes() + int(p[i]).to_bytes(8, "little", signed=True)
        for i in range(len(p))
    ]


# ------------------------------------------------------------------------------------ server


class Server:
    """Serves the classes of `spec` from the repo at `repo` (on sys.path) to one run.

    spec = {"classes": {"data.TrainingSplit": {"construct": ["scale"], "methods": ["get"],
                        "attributes": ["budget", "served", "remaining"], "len": true}, ...},
            "values": ["env.Levels"], "report": ["data.TrainingSplit"]}
    `construct` lists the constructor's parameters, each pinned to the run's value (`pins`):
    the server builds the object itself, and a request must name the same values (or fewer,
    in order). Classes without `construct` are only returned by methods (a batch of episodes)."""

    def __init__(self, spec: dict, pins: dict):
        self.spec, self.pins = spec, pins
        self.lock = threading.Lock()
        self.classes = {name: self._resolve(name) for name in spec["classes"]}
        self.codec_values = _value_classes(spec.get("values", []))
        self.objects: dict[int, tuple[str, object]] = {}
        self.singletons: dict[str, int] = {}
        self.next_ref = 1
        self.calls = 0
        self.ledgers: dict[int, Ledger] = {}  # the wire's own count, per constructed object
        self.episodes: dict[int, dict] = {}  # per batch of episodes (a VecEnv): its ledger, done, credit
        self.bounds: dict[int, dict] = {}  # declared bounds of an object, read once

    @staticmethod
    def _resolve(name: str):
        mod, _, qual = name.rpartition(".")
        return getattr(importlib.import_module(mod), qual)

    def _ref_of(self, obj):
        for ref, (_, known) in self.objects.items():
            if known is obj:
                return ref
        for name, cls in self.classes.items():
            if type(obj) is cls:
                ref = self.next_ref
                self.next_ref += 1
                self.objects[ref] = (name, obj)
                kept = set(self.singletons.values())
                same = [r for r, (n, _) in self.objects.items() if n == name and r not in kept]
                for r in same[:-MAX_OBJECTS]:
                    del self.objects[r]
                    self.episodes.pop(r, None)
                    self.bounds.pop(r, None)
                return ref
        return None

    def _obj_of(self, ref: int, cls):
        if ref not in self.objects:
            raise MeterError(f"no object {ref} on the meter (at most {MAX_OBJECTS} of a kind are kept)")
        return self.objects[ref][1]

    def handle(self, header: dict, buffers: list) -> tuple[dict, list]:
        op = header.get("op")
        if op == "hello":
            return {"spec": {"classes": self.spec["classes"], "values": self.spec.get("values", [])}}, []
        codec = _Codec(self.codec_values, ref_of=self._ref_of, obj_of=self._obj_of)
        args = header.get("args", [])
        kwargs = header.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise MeterError("a meter request's arguments are malformed")
        args = [codec.decode(a, buffers) for a in args]
        kwargs = {str(k): codec.decode(v, buffers) for k, v in kwargs.items()}
        with self.lock:
            self.calls += 1
            commit: list = []
            value = self._dispatch(op, header, args, kwargs, commit)
            out: list = []
            reply = {"value": codec.encode(value, out)}
            total = 4 + len(json.dumps({**reply, "buffers": [len(b) for b in out]}).encode()) + sum(len(b) for b in out)
            if total > MAX_FRAME:
                raise MeterError(
                    f"a meter reply of {total} bytes is over the limit of {MAX_FRAME}: ask for less at once"
                )
            for c in commit:  # counted once the reply is sure to go
                c()
            return reply, out

    def _dispatch(self, op, header, args, kwargs, commit: list):
        if op == "new":
            name = header.get("cls")
            spec = self.spec["classes"].get(name) if isinstance(name, str) else None
            if spec is None or "construct" not in spec:
                raise MeterError(
                    f"the meter serves no {name!r} (it serves "
                    f"{', '.join(n for n, s in self.spec['classes'].items() if 'construct' in s)})"
                )
            params = spec["construct"]
            asked = dict(zip(params, args))
            if len(args) > len(params) or set(kwargs) - set(params) or set(kwargs) & set(asked):
                raise MeterError(f"{name} takes ({', '.join(params)})")
            asked.update(kwargs)
            for k, v in asked.items():
                if v != self.pins[k] and not (k == "device" and str(v) == str(self.pins[k])):
                    raise MeterError(f"{name}: this run's {k} is {self.pins[k]!r}, not {v!r}")
            if name not in self.singletons:
                obj = self.classes[name](*[self.pins[k] for k in params])
                ref = self.next_ref
                self.next_ref += 1
                self.objects[ref] = (name, obj)
                self.singletons[name] = ref
                budget = self._bound(ref, obj, spec.get("budget", "@budget"))
                if type(budget) is not int or budget < 0:
                    raise MeterError(f"{name}: its budget is {budget!r}, not a count")
                self.ledgers[ref] = Ledger(spec.get("unit", "items"), budget)
            return self.objects[self.singletons[name]][1]
        ref = header.get("ref")
        if not isinstance(ref, int) or ref not in self.objects:
            raise MeterError(f"no object {ref!r} on the meter")
        name, obj = self.objects[ref]
        spec = self.spec["classes"][name]
        attr = header.get("name")
        if op == "call" and isinstance(attr, str) and attr in spec["methods"]:
            return self._call(ref, name, obj, attr, args, kwargs, commit)
        if op == "get" and attr in spec["attributes"]:
            return getattr(obj, attr)
        if op == "len" and spec.get("len"):
            return len(obj)
        if op == "count" and ref in self.ledgers:  # the wire's own count of a constructed object
            return {k: v for k, v in self.ledgers[ref].report().items()}
        raise MeterError(f"{name} serves no {op} {attr!r}")

    def _bound(self, ref: int, obj, b):
        """A declared bound's value for the object `ref` (see the signatures' comment)."""
        if not isinstance(b, str):
            return b
        if b == "$remaining":
            ledger = self.ledgers.get(ref) or self.episodes.get(ref, {}).get("ledger")
            return None if ledger is None else ledger.remaining
        cache = self.bounds.setdefault(ref, {})
        if b not in cache:
            if b == "@len":
                cache[b] = len(obj)
            elif b.startswith("@"):
                v = obj
                for part in b[1:].split("."):
                    v = getattr(v, part)
                cache[b] = v
            elif b.startswith("="):
                cache[b] = _resolve_class(b[1:])
            else:
                raise MeterError(f"a malformed bound {b!r} in the meter's spec")
        return cache[b]

    def _exhausted(self, name: str, ledger: Ledger, asked: int):
        msg = (
            f"budget of {ledger.budget} {ledger.unit} is spent ({ledger.served} served"
            + (f", {ledger.reserved} reserved" if ledger.reserved else "")
            + f", this request asks {asked})"
        )
        exc = self.spec["classes"][name].get("exhausted")
        cls = _resolve_class(exc) if exc else MeterError
        raise cls(msg)

    def _call(self, ref: int, name: str, obj, attr: str, args: list, kwargs: dict, commit: list):
        """A served method: its signature checked, its reply counted on the wire (`commit`, run once
        the reply is sure to go), and refused where that count would pass the budget."""
        sig = self.spec["classes"][name]["methods"][attr]
        qual = f"{name.rpartition('.')[2]}.{attr}"
        got = _Signed(qual, sig, lambda b: self._bound(ref, obj, b)).bind(args, kwargs)
        rule = sig.get("count", "free")
        np = importlib.import_module("numpy")
        if rule == "free":
            return getattr(obj, attr)(*args, **kwargs)
        if rule == "steps":
            ep = self.episodes.get(ref)
            if ep is None:
                raise MeterError(f"{qual}: these episodes were not reset through the meter")
            ledger, done, credit = ep["ledger"], ep["done"], ep["credit"]
            active = ~done
            paid = active & (credit > 0)
            unpaid = int((active & ~paid).sum())
            if unpaid > ledger.remaining:
                self._exhausted(ep["owner"], ledger, unpaid)
            value = getattr(obj, attr)(*args, **kwargs)
            arrays = _arrays(value)
            if len(arrays) < 3 or tuple(arrays[2].shape) != done.shape or _dtype_name(arrays[2]) != "bool":
                raise MeterError(f"{qual}: the reply is not (observation, solved, done): not sent")
            now = np.asarray(_numpy(arrays[2])) | done

            def steps():
                ledger.served += int(active.sum())
                ledger.reserved -= int(paid.sum())
                credit[paid] -= 1
                ended = now & (credit > 0)  # ended early: the unused prepaid steps are released
                ledger.reserved -= int(credit[ended].sum())
                credit[ended] = 0
                done[:] = now

            commit.append(steps)
            return value
        ledger = self.ledgers.get(ref)
        if ledger is None:
            raise MeterError(f"{qual}: no budget on the meter to count it against")
        if "claim" in rule:
            value = getattr(obj, attr)(*args, **kwargs)
            keys = _level_keys(got[rule["claim"]])
            vref = self._ref_of(value)
            if vref is None or len(value) != len(keys):
                raise MeterError(f"{qual}: the reply is not a batch of {len(keys)} episodes: not sent")

            def claim():
                credit = np.zeros(len(keys), dtype=np.int64)
                for i, k in enumerate(keys):
                    left = ledger.prepaid.get(k)
                    if left:
                        credit[i] = left.pop()
                        if not left:
                            del ledger.prepaid[k]
                self.episodes[vref] = {
                    "ledger": ledger,
                    "owner": name,
                    "done": np.zeros(len(keys), dtype=bool),
                    "credit": credit,
                }

            commit.append(claim)
            return value
        if "prepay" in rule:
            n, per = got[rule["prepay"]], self._bound(ref, obj, rule["per"])
            asked = n * per
            if asked > ledger.remaining:
                self._exhausted(name, ledger, asked)
            value = getattr(obj, attr)(*args, **kwargs)
            keys = _level_keys(value)
            if len(keys) != n:
                raise MeterError(f"{qual}: the reply is not {n} levels: not sent")

            def prepay():
                ledger.reserved += asked
                for k in keys:
                    ledger.prepaid.setdefault(k, []).append(per)

            commit.append(prepay)
            return value
        if "rows" in rule:
            rows = int(got[rule["rows"]].shape[0])
            worst, actual_of = rows, None
        elif "tokens" in rule:
            first = got[rule["tokens"][0]]
            rows = int(first.shape[0])
            fixed = sum(_nonpad(got[a], rule.get("pad", 0)) for a in rule["tokens"] if a in got)
            worst = fixed + rows * int(self._bound(ref, obj, rule.get("per_row", 0)))
            k = rule.get("reply")
            actual_of = lambda arrays: fixed + (_nonpad(arrays[k], rule.get("pad", 0)) if k is not None else 0)
        else:
            raise MeterError(f"{qual}: no count rule {rule!r}")
        if worst > ledger.remaining:
            self._exhausted(name, ledger, worst)
        value = getattr(obj, attr)(*args, **kwargs)
        arrays = _arrays(value)
        if not arrays or any(tuple(a.shape[:1]) != (rows,) for a in arrays):
            raise MeterError(f"{qual}: the reply is not {rows} rows: not sent")
        actual = worst if actual_of is None else actual_of(arrays)
        if actual > worst:
            raise MeterError(f"{qual}: the reply counts {actual} {ledger.unit}, over the {worst} checked: not sent")

        def count():
            ledger.served += actual

        commit.append(count)
        return value

    def report(self) -> dict:
        """Per constructed object, the wire's own count (authoritative: `served`, `budget`,
        `remaining`, in `unit`) and under `class` what the object says of itself (its attributes)."""
        out = {"calls": self.calls}
        with self.lock:
            for name, ref in self.singletons.items():
                _, obj = self.objects[ref]
                vals = {}
                for a in self.spec["classes"][name]["attributes"]:
                    try:
                        v = getattr(obj, a, None)
                    except Exception:
                        v = None
                    if isinstance(v, (int, float, str, bool)) or v is None:
                        vals[a] = v
                out[name] = {**self.ledgers[ref].report(), "class": vals}
        return out


def _serve_connection(server: Server, conn: socket.socket) -> None:
    with conn:
        while True:
            try:
                header, buffers = recv_frame(conn)
            except (EOFError, OSError):
                return
            except Exception as e:  # a malformed frame: answer once, then drop the peer
                _reply_error(conn, e)
                return
            try:
                reply, out = server.handle(header, buffers)
                send_frame(conn, {**reply, "buffers": [len(b) for b in out]}, out)
            except Exception as e:
                if not _reply_error(conn, e):
                    return


def _reply_error(conn: socket.socket, e: Exception) -> bool:
    mod = type(e).__module__
    err = {"type": type(e).__name__, "module": mod, "message": str(e)[:2000]}
    try:
        send_frame(conn, {"error": err, "buffers": []}, [])
        return True
    except Exception:
        return False


def serve(argv: list[str]) -> None:
    """python meter_wire.py serve SOCKET SPEC_JSON PINS_JSON REPORT_PATH (cwd: the repo)."""
    sock_path, spec, pins, report_path = argv[0], json.loads(argv[1]), json.loads(argv[2]), argv[3]
    sys.path.insert(0, os.getcwd())
    try:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ImportError:
        pass
    server = Server(spec, pins)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path + ".new")
    os.chmod(sock_path + ".new", 0o777)  # the training sandbox's user connects
    listener.listen(16)
    os.rename(sock_path + ".new", sock_path)  # the path appears only once it accepts (serving waits for it)
    listener.settimeout(0.2)
    print("meter ready", flush=True)
    # The harness that started this server stops it (SIGTERM); one killed outright (kill -9, the OOM
    # killer) cannot, and the server was left serving, orphaned. Reparented means that parent is gone.
    parent = os.getppid()
    live: list = []
    while not stop.is_set():
        if os.getppid() != parent:
            break
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            break
        live = [t for t in live if t.is_alive()]
        if len(live) >= MAX_CONNECTIONS:  # the host's memory is not the submission's to spend
            _reply_error(conn, MeterError(f"at most {MAX_CONNECTIONS} connections to the meter at once"))
            conn.close()
            continue
        t = threading.Thread(target=_serve_connection, args=(server, conn), daemon=True)
        t.start()
        live.append(t)
    listener.close()
    tmp = report_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(server.report(), f, indent=2, sort_keys=True)
    os.replace(tmp, report_path)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "serve":
    serve(sys.argv[2:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the report is written; tearing down torch would only cost the grade time
