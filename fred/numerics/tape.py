"""The numerics tape: every jitted computation of a run, in order, replayable without the engine.

Strategies call a handful of jitted functions (gradients, sums, optimizer steps,
mixing). Each is declared with :func:`op`; while a run records, every call is written
down as *(function, inputs, outputs)*, where an input is either the output of an
earlier call (``[index]``), a literal (Python number, string, ``None``) or a
constant array seen for the first time (the initial parameters, a batch's row
indices, a mixing weight), which the tape keeps as a numpy copy so that it does not
keep the jax array alive. ``fred replay`` (:mod:`fred.tools.replay`) re-executes the calls
that lead to the final parameters, in the recorded order, with no SimPy at all.

Only the outermost call is recorded (a recorded function that calls another is one
call). Values are recognised by identity (checked with a weak reference, and forgotten
once freed). A call's inputs and outputs are stored flat, as leaf codes plus the index
of their tree structure, which repeats from update to update and is written once.

In memory a value reference is the tuple ``(index,)`` and a call's codes are a tuple:
plain tuples of numbers are untracked by Python's garbage collector, so a call's codes
add nothing to the full collections that would otherwise walk them again and again. The
:class:`Call` holding them is a named tuple, which Python keeps tracked (it untracks
exact tuples only): one object per call. JSON writes the same tuples as ``[index]``
lists, so the file is unchanged.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import weakref
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence, TypeVar

import jax
import numpy as np

from fred.numerics.tape_nodes import Slot as _Slot
from fred.numerics.tape_nodes import decode, encode, resolve

F = TypeVar("F", bound=Callable[..., Any])
_ACTIVE: contextvars.ContextVar[Tape | None] = contextvars.ContextVar("fred_tape", default=None)
_flatten = (
    jax.tree_util.default_registry.flatten
)  # jax.tree.flatten without its two Python wrappers: a tape flattens twice a call


# a leaf on the tape: ``(index,)`` for an array value (``[index]`` in the file), the literal otherwise
Code = Any


class Call(NamedTuple):
    """One recorded call: which function (``name`` and factory ``key``), its inputs and outputs.

    ``args`` and ``out`` index the tape's tree structures; ``arg_codes`` and ``out_codes``
    are the flattened leaves, each ``(value index,)`` or a literal.
    """

    name: str
    key: tuple[Any, ...] | None
    args: int
    arg_codes: tuple[Code, ...]
    out: int
    out_codes: tuple[Code, ...]


def is_ref(code: Code) -> bool:
    """Whether ``code`` names a value: a one-item tuple in memory, a list in a file's JSON."""
    return isinstance(code, (tuple, list))


def refs(codes: Sequence[Code]) -> list[int]:
    """The value indices among ``codes``."""
    return [c[0] for c in codes if is_ref(c)]


def op(name: str, key: tuple[Any, ...] | None = None) -> Callable[[F], F]:
    """Record calls of the decorated function on the active tape.

    ``name`` is ``"module:attribute"``, a module of fred, of ``strategies`` or of a strategy
    plug-in's package (:func:`resolve`). Without ``key`` the attribute is the function
    itself; with ``key`` it is a factory that, called with ``*key`` (JSON values),
    returns the function again (for functions built per hyper-parameter set).
    """

    def decorate(fn: F) -> F:
        found: list[bool] = []  # checked at the first recorded call: the module is fully imported by then

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                raise TypeError(
                    f"{name} takes its arguments by position only (the tape records them in order); "
                    f"pass {', '.join(kwargs)} by position"
                )
            tape = _ACTIVE.get()
            if tape is None or tape.depth:
                return fn(*args)
            if not found:
                _check_resolves(name, key)
                found.append(True)
            return tape.call(name, key, fn, args)

        recorded.__tape_name__ = name  # type: ignore[attr-defined]
        return recorded  # type: ignore[return-value]

    return decorate


REPLAY_BUILDS = frozenset(
    {"gradients"}
)  # ops replay rebuilds from the run's scenario (fred.tools.replay's context)


def _check_resolves(name: str, key: tuple[Any, ...] | None) -> None:
    # Replay finds the function by this name; a typo or a function defined inside another
    # would otherwise run and be recorded, and fail only at replay.
    if name in REPLAY_BUILDS:
        return
    try:
        target = resolve(name)
    except (ValueError, ImportError, AttributeError) as err:
        raise TypeError(
            f"fred.numerics.tape.op({name!r}) cannot be found by replay ({err}): name the decorated function "
            "'module:attribute' of a module in fred, strategies or the package of an installed strategy "
            "plug-in "
            "(the module its fred.strategies entry point names, or one inside it), at module level"
        ) from None
    if not callable(target):
        kind = "a factory (it has a key)" if key is not None else "the function"
        raise TypeError(f"fred.numerics.tape.op({name!r}) names a {type(target).__name__}, not {kind}")


class NeedsValue(RuntimeError):
    """A fast-forwarding run read a number that only a real computation could give."""


class ResumeMismatch(RuntimeError):
    """A fast-forwarding run made a call other than the one its checkpoint recorded."""


class Placeholder:
    """A value a fast-forwarding run did not compute; filled from a checkpoint when still needed."""

    __slots__ = ("index", "value", "__weakref__")

    def __init__(self, index: int):
        self.index, self.value = index, None

    def get(self) -> Any:
        if self.value is None:
            raise NeedsValue(
                f"value {self.index} was read outside a recorded computation while fast-forwarding"
            )
        return self.value

    def __float__(self) -> float:
        return float(self.get())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.get(), dtype=dtype)

    def _used(self, *_: Any) -> Any:
        raise NeedsValue(
            f"value {self.index} was used in a computation the tape does not record (not a "
            "fred.numerics.tape.op) "
            "while fast-forwarding"
        )


# Arithmetic on a value outside a recorded computation needs the number too (``x * y`` in a
# strategy's own code); equality and hashing stay by identity, which the tape relies on.
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul"):
    for _dunder in (f"__{_name}__", f"__r{_name}__"):
        setattr(Placeholder, _dunder, Placeholder._used)
for _dunder in (
    "__neg__",
    "__pos__",
    "__abs__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__bool__",
    "__int__",
    "__index__",
    "__len__",
    "__iter__",
    "__getitem__",
):
    setattr(Placeholder, _dunder, Placeholder._used)


def read_outside_tape(err: BaseException) -> bool:
    """Whether ``err`` is JAX refusing a placeholder: an unrecorded jitted function was given one while
    fast-forwarding."""
    return isinstance(err, (TypeError, ValueError)) and f"{Placeholder.__module__}.Placeholder" in str(err)


def resolved(tree: Any) -> Any:
    """``tree`` with every placeholder replaced by its value (for code outside recorded calls)."""
    return jax.tree.map(lambda x: x.get() if type(x) is Placeholder else x, tree)


def active_tape() -> Tape | None:
    """The tape recording the current run, if any."""
    return _ACTIVE.get()


_ARRAY_TYPES: set[type] = set()
_OTHER_TYPES: set[type] = set()
_SCALAR_TYPES: set[type] = set()  # numpy scalars: arrays that cannot be weakly referenced
_REFERABLE: set[type] = set()  # the other arrays (jax's, numpy's): what a call's outputs mostly are


def is_array(leaf: Any) -> bool:
    # By concrete type, cached: isinstance against jax.Array (an ABC) is slow, and the
    # tape asks for every leaf of every call.
    kind = type(leaf)
    if kind in _ARRAY_TYPES:
        return True
    if kind in _OTHER_TYPES:
        return False
    array = isinstance(leaf, (jax.Array, np.ndarray, np.generic))
    (_ARRAY_TYPES if array else _OTHER_TYPES).add(kind)
    if array:
        (_SCALAR_TYPES if isinstance(leaf, np.generic) else _REFERABLE).add(kind)
    return array


class Tape:
    """The calls of one run, the tree structures they pass, and the constant arrays they read."""

    def __init__(self, replay: Recorded | None = None) -> None:
        self._replay = replay  # fast-forward through these calls (a resume), then compute
        self._placeholders: dict[int, Any] = {}  # index -> weak reference to its placeholder
        self.calls: list[Call] = []
        self.constants: dict[int, np.ndarray] = {}
        self.compute_s: dict[int, list[float]] = {}  # call index -> simulated compute seconds per shard
        self.treedefs: list[Any] = []
        self.values = 0  # value indices handed out so far
        self.depth = 0
        self._treedef_ids: dict[Any, int] = {}
        self._refs: dict[int, _Ref] = {}  # id(array) -> weak reference to it, with its code
        self._forget = _forgetter(self._refs)

    def __enter__(self) -> Tape:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)

    def call(
        self, name: str, key: tuple[Any, ...] | None, fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> Any:
        if self._replay is not None and len(self.calls) < len(self._replay.calls):
            return self._fast_forward(name, key, args)
        leaves, treedef = _flatten(args)
        arg_codes = self._codes(leaves)
        args_def = self._treedef(treedef)
        if self._placeholders and Placeholder in map(type, leaves):  # a resumed run's: they give their values
            args = jax.tree.unflatten(treedef, [x.get() if type(x) is Placeholder else x for x in leaves])
        self.depth += 1
        try:
            result = fn(*args)
        finally:
            self.depth -= 1
        leaves, out_def = _flatten(result)
        self.calls.append(
            _new_call((name, key, args_def, arg_codes, self._treedef(out_def), self._outputs(leaves)))
        )
        return result

    def _fast_forward(self, name: str, key: tuple[Any, ...] | None, args: tuple[Any, ...]) -> Any:
        """Check the call against the recorded one and answer with placeholders, computing nothing."""
        recorded = self._replay
        assert recorded is not None
        args_def, arg_codes = self.codes(args)  # first: reading a lazy input may itself be a call (GradSum)
        expected = recorded.calls[len(self.calls)]
        same = (name, key, arg_codes) == (expected.name, expected.key, expected.arg_codes)
        if not same or self.treedefs[args_def] != recorded.treedefs[expected.args]:
            raise ResumeMismatch(
                f"call {len(self.calls)} is {name}, not the checkpoint's {expected.name} with the same inputs"
            )
        out_def = recorded.treedefs[expected.out]
        leaves = [self._placeholder(c[0]) if is_ref(c) else c for c in expected.out_codes]
        made = refs(expected.out_codes)
        if made:  # the indices these outputs took in the checkpointed run: keep counting after them
            self.values = max(self.values, max(made) + 1)
        self.calls.append(Call(name, key, args_def, arg_codes, self._treedef(out_def), expected.out_codes))
        return jax.tree.unflatten(out_def, leaves)

    def _placeholder(self, index: int) -> Placeholder:
        holder = Placeholder(index)
        self._placeholders[index] = weakref.ref(holder)
        return holder

    def fill(self, values: dict[int, np.ndarray]) -> None:
        """End the fast-forward: every placeholder still alive gets its saved value."""
        for index, ref in self._placeholders.items():
            holder = ref()
            if holder is not None and index in values:
                holder.value = jax.numpy.asarray(values[index])
        self._replay = None

    def live_values(self) -> dict[int, np.ndarray]:
        """Every value still referenced by the run (after a garbage collection: exactly what it can read)."""
        entries = list(self._refs.values())  # a copy: freeing an array removes its entry
        live = {ref.code[0]: np.asarray(value) for ref in entries if (value := ref()) is not None}
        for index, ref in self._placeholders.items():
            holder = ref()
            if holder is not None and holder.value is not None:
                live[index] = np.asarray(holder.value)
        return live

    def note_compute(self, durations_s: Sequence[float]) -> None:
        """The simulated compute times of the shards of the latest (gradient) call."""
        self.compute_s[len(self.calls) - 1] = tuple(durations_s)  # a tuple: untracked by the collector

    def codes(self, tree: Any) -> tuple[int, tuple[Code, ...]]:
        """``tree`` as (structure index, leaf codes); arrays seen for the first time become constants."""
        leaves, treedef = _flatten(tree)
        codes = self._codes(leaves)
        return self._treedef(treedef), codes

    def _codes(self, leaves: list[Any]) -> tuple[Code, ...]:
        known = self._refs
        codes = []
        for leaf in leaves:  # mostly earlier outputs: one lookup each, the code tuple already made
            ref = known.get(id(leaf))
            codes.append(ref.code if ref is not None and ref() is leaf else self._input(leaf))
        return tuple(codes)

    def _treedef(self, treedef: Any) -> int:
        index = self._treedef_ids.get(
            treedef
        )  # one lookup: comparing a gradient call's structure takes ~2 us
        if index is None:
            index = self._treedef_ids[treedef] = len(self.treedefs)
            self.treedefs.append(treedef)
        return index

    def _input(self, leaf: Any) -> Code:
        """The code of a leaf that is not a known value: a placeholder's, a literal, or a new constant."""
        if type(leaf) is Placeholder:
            return (leaf.index,)
        if not is_array(leaf):
            return _literal(leaf)
        code = self._new(leaf)
        self.constants[code[0]] = _host_copy(leaf)
        return code

    def _outputs(self, leaves: list[Any]) -> tuple[Code, ...]:
        """The codes of a call's output leaves: each array a new value (:meth:`_new` written out,
        with the counter kept in a local: every call has outputs, a gradient call dozens)."""
        index, codes = self.values, []
        known, forget = self._refs, self._forget
        for leaf in leaves:
            if type(leaf) in _REFERABLE:  # :meth:`_remember`, written out: the common case
                code, key = (index,), id(leaf)
                ref = known[key] = _Ref(leaf, forget)
                ref.code, ref.key = code, key
            elif is_array(leaf):  # a numpy scalar (no weak reference to it), or a type not met before
                code = (index,)
                if type(leaf) not in _SCALAR_TYPES:
                    self._remember(leaf, code)
            else:
                codes.append(_literal(leaf))
                continue
            index += 1
            codes.append(code)
        self.values = index
        return tuple(codes)

    def _new(self, leaf: Any) -> tuple[int]:
        code = (self.values,)
        self.values += 1
        if type(leaf) not in _SCALAR_TYPES:
            self._remember(leaf, code)
        return code

    def _remember(self, leaf: Any, code: tuple[int]) -> None:
        # The entry goes when the array does (the weak reference's callback): entries left
        # for a periodic sweep lived long enough to reach the oldest generation and brought
        # on full collections of the heap (~0.1 s each, every ~500 updates of an SSGD run).
        ref = _Ref(leaf, self._forget)
        ref.code, ref.key = code, id(leaf)
        self._refs[ref.key] = ref


_new_call = functools.partial(tuple.__new__, Call)  # Call(*fields) without the named tuple's Python __new__


class _Ref(weakref.ref):
    """A weak reference to a recorded array, with the array's code and table key."""

    __slots__ = ("code", "key")


def _forgetter(refs: dict[int, _Ref]) -> Callable[[_Ref], None]:
    """The callback that drops a freed array's entry (it holds the table, not the tape)."""

    def forget(ref: _Ref) -> None:
        if refs.get(key := ref.key) is ref:
            del refs[key]

    return forget


def _host_copy(leaf: Any) -> np.ndarray:
    # A copy, not np.asarray's view: the view holds the jax array through the buffer protocol
    # (a memoryview and its buffer: three objects the collector walks, and the device buffer)
    # for as long as the tape. A 32-node OSGP run's mixing weights made 32,000 such constants,
    # ~97,000 of the ~600,000 objects every full collection walked. A numpy input is kept as is.
    if type(leaf) is np.ndarray:  # a batch's row indices: every gradient call has one
        return leaf
    return np.array(leaf) if isinstance(leaf, jax.Array) else np.asarray(leaf)


_LITERALS = (bool, int, float, str)


def _literal(leaf: Any) -> Any:
    if type(leaf) in _LITERALS or leaf is None or isinstance(leaf, _LITERALS):
        return leaf
    raise TypeError(f"cannot record a {type(leaf).__name__} on the numerics tape; pass arrays or numbers")


# ----------------------------------------------------------------------------- files
class Recorded(NamedTuple):
    """A tape as stored: calls, structures, constants, the final parameters and compute times."""

    calls: list[Call]
    treedefs: list[Any]
    constants: dict[int, np.ndarray]
    final: tuple[int, tuple[Code, ...]]
    compute_s: dict[int, list[float]]


class Mark(NamedTuple):
    """How much of a tape a file already holds: calls, tree structures and value indices."""

    calls: int = 0
    treedefs: int = 0
    values: int = 0


def mark(tape: Tape) -> Mark:
    """Where ``tape`` is now: a later :func:`document` from here holds only what came after."""
    return Mark(len(tape.calls), len(tape.treedefs), tape.values)


def document(
    tape: Tape,
    final: tuple[int, Sequence[Code]],
    since: Mark = Mark(),  # noqa: B008 (Mark is an immutable NamedTuple)
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The tape as JSON-able data plus its constants packed into one flat array per dtype.

    The calls and their codes go in as the tuples they are: JSON writes a :class:`Call` as the
    list ``[name, key, args, arg_codes, out, out_codes]`` a file holds, and each code as
    ``[index]``. From a :class:`Mark` it is the part of the tape made since (a checkpoint's next
    segment): the later calls, structures, constants and compute times, with their indices unchanged.
    """
    table, blobs = pack({i: v for i, v in tape.constants.items() if i >= since.values})
    treedefs = tape.treedefs[since.treedefs :]
    structures = [encode(jax.tree.unflatten(td, [_Slot(i) for i in range(td.num_leaves)])) for td in treedefs]
    doc = {
        "calls": tape.calls[since.calls :],
        "treedefs": structures,
        "constants": table,
        "final": list(final),
        "compute_s": {str(i): d for i, d in tape.compute_s.items() if i >= since.calls},
    }
    return doc, blobs


def pack(
    arrays: dict[int, np.ndarray], prefix: str = "blob"
) -> tuple[list[list[Any]], dict[str, np.ndarray]]:
    """Arrays by index as one flat array per dtype (``prefix<dtype>``) and a table of
    ``[index, dtype, shape, offset]``: a file of thousands of small arrays is a few entries."""
    packed: dict[str, list[np.ndarray]] = {}
    offsets: dict[str, int] = {}
    table = []
    for index in sorted(arrays):
        value = np.asarray(arrays[index])
        kind = value.dtype.str
        table.append([index, kind, list(value.shape), offsets.get(kind, 0)])
        packed.setdefault(kind, []).append(value.ravel())
        offsets[kind] = offsets.get(kind, 0) + value.size
    return table, {f"{prefix}{kind}": np.concatenate(parts) for kind, parts in packed.items()}


def unpack(
    table: list[list[Any]], blobs: dict[str, np.ndarray], prefix: str = "blob"
) -> dict[int, np.ndarray]:
    """What :func:`pack` packed."""
    arrays = {}
    for index, kind, shape, offset in table:
        size = int(np.prod(shape, dtype=np.int64))
        arrays[index] = blobs[f"{prefix}{kind}"][offset : offset + size].reshape(shape)
    return arrays


# The same text as json.dumps, without its check for a list that holds itself (a tape's
# lists never do): a third of the time of a tape's thousands of small lists.
_json = functools.partial(json.dumps, check_circular=False)


def digest(doc: dict[str, Any], blobs: dict[str, np.ndarray]) -> str:
    """SHA-256 of the content (not of the zip file, whose bytes carry timestamps)."""
    h = hashlib.sha256(_json(doc, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(blobs):
        value = np.ascontiguousarray(blobs[name])
        h.update(f"{name}:{value.dtype.str}:{value.shape}".encode() + value.tobytes())
    return h.hexdigest()


def write(path: Path, doc: dict[str, Any], blobs: dict[str, np.ndarray], **extra: np.ndarray) -> None:
    """A tape file; ``extra`` arrays ride along (a checkpoint's state and live values)."""
    with open(path, "wb") as f:
        np.savez_compressed(f, tape=json_array(doc), **blobs, **extra)


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The document and constant blobs of a tape file (for :func:`digest` and :func:`parse`), and any
    extras."""
    with np.load(path, allow_pickle=False) as data:
        doc = json.loads(bytes(data["tape"]).decode())
        blobs = {name: data[name] for name in data.files if name.startswith("blob")}
        extra = {name: data[name] for name in data.files if name != "tape" and not name.startswith("blob")}
    return doc, blobs, extra


def json_array(document: Any) -> np.ndarray:
    """JSON as bytes in an array, the form npz files hold it in (nothing pickled)."""
    return np.frombuffer(_json(document).encode(), np.uint8)


def parse(doc: dict[str, Any], blobs: dict[str, np.ndarray]) -> Recorded:
    """The tape a file's document and blobs hold; the document's call list is used up on the way."""
    constants = unpack(doc["constants"], blobs)
    treedefs = [jax.tree.structure(decode(node)) for node in doc["treedefs"]]
    listed, calls = doc["calls"], []
    for k, (name, key, a, ac, o, oc) in enumerate(listed):
        calls.append(Call(name, tuple(key) if key is not None else None, a, _codes(ac), o, _codes(oc)))
        listed[k] = None  # the file's lists go as their calls come: not both whole at once (twice the memory)
    compute_s = {int(i): d for i, d in doc["compute_s"].items()}
    final_def, final_codes = doc["final"]
    return Recorded(calls, treedefs, constants, (final_def, _codes(final_codes)), compute_s)


def joined(parts: Sequence[Recorded], final: tuple[int, tuple[Code, ...]]) -> Recorded:
    """Segments of one tape, each documented since the end of the one before, as one."""
    calls, treedefs, constants, compute_s = [], [], {}, {}
    for part in parts:
        calls += part.calls
        treedefs += part.treedefs
        constants.update(part.constants)
        compute_s.update(part.compute_s)
    return Recorded(calls, treedefs, constants, final, compute_s)


def _codes(codes: list[Any]) -> tuple[Code, ...]:
    """A file's leaf codes as a tape holds them in memory: each ``[index]`` as ``(index,)``."""
    return tuple((c[0],) if isinstance(c, list) else c for c in codes)
