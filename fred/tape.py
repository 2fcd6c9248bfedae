"""The numerics tape: every jitted computation of a run, in order, replayable without the engine.

Strategies call a handful of jitted functions (gradients, sums, optimizer steps,
mixing). Each is declared with :func:`op`; while a run records, every call is written
down as *(function, inputs, outputs)*, where an input is either the output of an
earlier call (a :class:`Ref`), a literal (Python number, string, ``None``) or a
constant array seen for the first time (the initial parameters, a batch's row
indices, a mixing weight). ``fred replay`` (:mod:`fred.replay`) re-executes the calls
that lead to the final parameters, in the recorded order, with no SimPy at all.

Only the outermost call is recorded (a recorded function that calls another is one
call). Values are recognised by identity; an array's entry is dropped when the array
is freed, so the map never outgrows the live values.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import importlib
import json
import weakref
from pathlib import Path
from typing import Any, Callable, NamedTuple, TypeVar

import jax
import numpy as np

F = TypeVar("F", bound=Callable[..., Any])
_ACTIVE: contextvars.ContextVar[Tape | None] = contextvars.ContextVar("fred_tape", default=None)


class Ref(NamedTuple):
    """A value on the tape: the ``index``-th value produced or first seen."""

    index: int


class Call(NamedTuple):
    """One recorded call: which function (``name`` and factory ``key``), its inputs and outputs."""

    name: str
    key: tuple[Any, ...] | None
    args: Any
    out: Any


def op(name: str, key: tuple[Any, ...] | None = None) -> Callable[[F], F]:
    """Record calls of the decorated function on the active tape.

    ``name`` is ``"module:attribute"``. Without ``key`` the attribute is the function
    itself; with ``key`` it is a factory that, called with ``*key`` (JSON values),
    returns the function again (for functions built per hyper-parameter set).
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def recorded(*args: Any) -> Any:
            tape = _ACTIVE.get()
            if tape is None or tape.depth:
                return fn(*args)
            return tape.call(name, key, fn, args)

        recorded.__tape_name__ = name  # type: ignore[attr-defined]
        return recorded  # type: ignore[return-value]

    return decorate


def active_tape() -> Tape | None:
    """The tape recording the current run, if any."""
    return _ACTIVE.get()


def is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


class Tape:
    """The calls of one run and the constant arrays they read."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.compute_s: dict[int, list[float]] = {}  # call index -> simulated compute seconds per shard
        self.constants: dict[int, np.ndarray] = {}
        self.values = 0  # refs handed out so far
        self.depth = 0
        self._refs: dict[int, int] = {}  # id(array) -> ref, for arrays still alive

    def __enter__(self) -> Tape:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)

    def call(self, name: str, key: tuple[Any, ...] | None, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        inputs = jax.tree.map(self._input, args, is_leaf=is_array)
        self.depth += 1
        try:
            result = fn(*args)
        finally:
            self.depth -= 1
        self.calls.append(Call(name, key, inputs, jax.tree.map(self._output, result, is_leaf=is_array)))
        return result

    def note_compute(self, durations_s: list[float]) -> None:
        """The simulated compute times of the shards of the latest (gradient) call."""
        self.compute_s[len(self.calls) - 1] = durations_s

    def ref(self, tree: Any) -> Any:
        """``tree`` with every array replaced by its ref (constants recorded on first sight)."""
        return jax.tree.map(self._input, tree, is_leaf=is_array)

    def _input(self, leaf: Any) -> Any:
        if not is_array(leaf):
            return leaf
        index = self._refs.get(id(leaf))
        if index is None:
            index = self._new(leaf)
            self.constants[index] = np.asarray(leaf)
        return Ref(index)

    def _output(self, leaf: Any) -> Any:
        return Ref(self._new(leaf)) if is_array(leaf) else leaf

    def _new(self, leaf: Any) -> int:
        index, self.values = self.values, self.values + 1
        if not isinstance(leaf, np.generic):  # numpy scalars cannot be weakly referenced
            self._refs[id(leaf)] = index
            weakref.finalize(leaf, self._refs.pop, id(leaf), None)
        return index


# ----------------------------------------------------------------------------- files
INLINE_SIZE = 1024  # constants up to this many elements live in the JSON (batch rows, weights)


class Recorded(NamedTuple):
    """A tape as stored: the calls, the constants, the final parameters' refs, compute times."""

    calls: list[Call]
    constants: dict[int, np.ndarray]
    final: Any
    compute_s: dict[int, list[float]]


def document(tape: Tape, final: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The tape as JSON-able data plus its large constants (keyed ``c<index>``)."""
    small = {str(i): [str(v.dtype), list(v.shape), v.ravel().tolist()] for i, v in tape.constants.items() if v.size <= INLINE_SIZE}
    large = {f"c{i}": v for i, v in tape.constants.items() if v.size > INLINE_SIZE}
    doc = {
        "calls": [[c.name, list(c.key) if c.key is not None else None, encode(c.args), encode(c.out)] for c in tape.calls],
        "final": encode(final),
        "small": small,
        "compute_s": {str(i): d for i, d in tape.compute_s.items()},
    }
    return doc, large


def digest(doc: dict[str, Any], large: dict[str, np.ndarray]) -> str:
    """SHA-256 of the content (not of the zip file, whose bytes carry timestamps)."""
    h = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(large, key=lambda n: int(n[1:])):
        value = np.ascontiguousarray(large[name])
        h.update(f"{name}:{value.dtype.str}:{value.shape}".encode() + value.tobytes())
    return h.hexdigest()


def write(path: Path, doc: dict[str, Any], large: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as f:
        np.savez_compressed(f, tape=np.frombuffer(json.dumps(doc).encode(), np.uint8), **large)


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The document and large constants of a tape file, for :func:`digest` and :func:`parse`."""
    with np.load(path, allow_pickle=False) as data:
        doc = json.loads(bytes(data["tape"]).decode())
        large = {name: data[name] for name in data.files if name != "tape"}
    return doc, large


def parse(doc: dict[str, Any], large: dict[str, np.ndarray]) -> Recorded:
    constants = {int(name[1:]): value for name, value in large.items()}
    for index, (dtype, shape, flat) in doc["small"].items():
        constants[int(index)] = np.asarray(flat, dtype=np.dtype(dtype)).reshape(shape)
    calls = [Call(name, tuple(key) if key is not None else None, decode(args), decode(out)) for name, key, args, out in doc["calls"]]
    compute_s = {int(i): d for i, d in doc["compute_s"].items()}
    return Recorded(calls, constants, decode(doc["final"]), compute_s)


# Pytree nodes are written as tagged JSON; named tuples only from fred's own modules,
# so reading a tape never imports or runs anything else.
def encode(tree: Any) -> Any:
    if isinstance(tree, Ref):
        return {"ref": tree.index}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        cls = type(tree)
        return {"named": f"{cls.__module__}:{cls.__qualname__}", "items": [encode(x) for x in tree]}
    if isinstance(tree, (list, tuple)):
        return {"list" if isinstance(tree, list) else "tuple": [encode(x) for x in tree]}
    if isinstance(tree, dict):
        return {"dict": [[k, encode(v)] for k, v in tree.items()]}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return {"lit": tree}
    raise TypeError(f"cannot record a {type(tree).__name__} on the numerics tape")


def decode(node: Any) -> Any:
    (tag, value), *_ = node.items()
    if tag == "ref":
        return Ref(value)
    if tag == "lit":
        return value
    if tag == "list":
        return [decode(x) for x in value]
    if tag == "tuple":
        return tuple(decode(x) for x in value)
    if tag == "dict":
        return {k: decode(v) for k, v in value}
    if tag == "named":
        return resolve(value)(*(decode(x) for x in node["items"]))
    raise ValueError(f"unknown tape node {tag!r}")


def resolve(name: str) -> Any:
    """``"module:attribute"`` of fred or its strategies (nothing else is ever imported)."""
    module, _, attribute = name.partition(":")
    if module.split(".")[0] not in ("fred", "strategies"):
        raise ValueError(f"the tape names {name!r}, outside fred and strategies")
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target
