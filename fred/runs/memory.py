"""Whether a run fits this machine's memory, estimated from the scenario before anything is built.

A run too large for the machine fails without a message of its own: a 1e9-unit hidden layer
ends in a JAX out-of-memory traceback, 4,096 workers of an MLP [1024, 1024] under Local SGD in
a segmentation fault, a ``std::bad_alloc`` or no exit at all. :func:`check_fits` estimates
what the run holds (its data, every copy of the parameters its strategy keeps, the leaves of
one exact gradient call, one evaluation chunk) from the scenario alone, and refuses a run whose
estimate exceeds the memory available, with the estimate, the limit and the fixes. It reads at
most a data file's header (and the labels of a data set given as arrays), and asks the model's
section (its kind, :mod:`fred.models`) for its parameters, widest value and stored activations:
a built-in kind counts them from its layers, a python model from one trace of its shapes,
allocating none. The estimate is deliberately rough (within a factor of about 1.5 of the peak
measured on CPU); ``fred run --memory-limit-gb N`` or ``FRED_MEMORY_LIMIT_GB=N`` sets the limit
for machines that have more than they report.

What one *simulated* worker would hold on its device is another question, answered from the
scenario alone by :func:`worker_memory`: its model states (parameters, gradients, optimizer
state) as ``strategy.sharding``'s ZeRO stage splits them, which ``summary.json`` repeats as
``memory_per_worker_bytes``.
"""

from __future__ import annotations

import gzip
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fred.numerics import cifar
from fred.numerics.gradients import CALL_LEAF_BYTES, CALL_ROWS, CHUNK_ROWS, PROGRAM_EQUATIONS, eval_chunk_rows
from fred.numerics.tokens import BYTE_VOCAB
from fred.scenario import model_workloads
from fred.scenario.model_workloads import IMAGE_SHAPE
from fred.scenario.schema import (
    ArraysData,
    CIFAR10Data,
    CIFAR100Data,
    DigitsData,
    MNISTData,
    ModelSection,
    Scenario,
    SyntheticData,
    SyntheticImagesData,
    SyntheticTokensData,
    TextData,
)

ENV = "FRED_MEMORY_LIMIT_GB"
GB = 1e9
FLOAT = 4  # bytes of a float32
PER_EXAMPLE_ROWS = (
    4 * CHUNK_ROWS
)  # per-example gradients of one call held at once, at most (measured: ~200-360)


class TooLarge(ValueError):
    """A run whose memory estimate exceeds the limit: refused before anything is built."""


class OutOfMemory(MemoryError):
    """An allocation failed before a run had begun (loading its data, building its model): the
    message says where, what fred had estimated, the limit and the fixes."""


@dataclass(frozen=True)
class Fit:
    """What :func:`check_fits` found: the estimate, in bytes, and the limit it was held to."""

    estimate: float
    limit: float
    source: str


@dataclass(frozen=True)
class Shape:
    """What the data set is, as far as memory goes: examples, one example's shape, outputs."""

    examples: int
    feature_shape: tuple[int, ...]
    outputs: int
    load_factor: float  # bytes held while loading, per float32 byte kept


@dataclass(frozen=True)
class Estimate:
    total: float
    parts: list[tuple[str, float]]
    params: int


def data_shape(scenario: Scenario) -> Shape | None:
    """The data set's size from the scenario, or a file's header; None if a file cannot tell
    (its loader then says what is wrong with it)."""
    source = scenario.data.source
    if isinstance(source, DigitsData):
        return Shape(1797, (8, 8, 1), 10, 1.0)
    if isinstance(source, SyntheticImagesData):
        return Shape(
            source.examples, IMAGE_SHAPE, source.classes, 3.0
        )  # the gathered templates, then the noise
    if isinstance(source, SyntheticTokensData):  # tokens and their labels, int32: as large as the features
        return Shape(source.examples, (source.context,), source.vocab, 3.0)
    if isinstance(source, (CIFAR10Data, CIFAR100Data)):
        return _cifar_shape(source)
    if isinstance(source, TextData):
        return _text_shape(scenario, source)
    if isinstance(source, SyntheticData):
        outputs = source.classes if source.task == "classification" else 1
        return Shape(source.examples, (source.features,), outputs, 5.0)  # float64 draws, then float32
    if isinstance(source, ArraysData):
        from fred.numerics.files import arrays_shape

        found = arrays_shape(source)
        # Memory-mapped float32 features are the file's pages; others are converted, as a held-out split is.
        return None if found is None else Shape(*found, 1.0)
    assert isinstance(source, MNISTData)
    try:
        shapes = _mnist_shapes(Path(source.path).expanduser())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if shapes is None:
        return None
    examples = sum(s[0] for s in shapes)
    pixels = shapes[0][1:3] if len(shapes[0]) >= 3 else (28, 28)
    return Shape(examples, (*pixels, 1), 10, 2.0)  # the file's bytes, then float32 pixels


def _cifar_shape(source: CIFAR10Data | CIFAR100Data) -> Shape | None:
    """The official folders' size, from the files' sizes (a batch is about 3 KiB an image);
    None for a folder the loader will refuse."""
    try:
        folder = cifar.find_folder(source)
    except FileNotFoundError:
        return None
    _, train, test = cifar.LAYOUTS[source.kind]
    files = [folder / name for name in (*train, test) if (folder / name).is_file()]
    examples = sum(f.stat().st_size for f in files) // (cifar.PIXELS + 16)  # pixels, a label, a file name
    # the file's bytes and its pixels as uint8, then float32 (kept, with the device copy counted apart)
    return Shape(max(examples, 1), IMAGE_SHAPE, cifar.classes(source), 1.5)


def _text_shape(scenario: Scenario, source: TextData) -> Shape | None:
    """A text file's windows, from its size in bytes (at least its characters)."""
    path = Path(source.path).expanduser()
    if not path.is_file():
        return None
    declared = model_workloads.declared_shape(source, scenario.model)
    vocab = (
        declared[1] if declared is not None else BYTE_VOCAB
    )  # characters: at most as many as bytes' values, mostly
    # x and y of the file's tokens: twice the features; the bytes, then the tokens, then the windows
    return Shape(max(path.stat().st_size // source.context, 1), (source.context,), vocab, 3.0)


def _mnist_shapes(path: Path) -> list[tuple[int, ...]] | None:
    """The image arrays' shapes, from IDX headers or the .npz members' headers."""
    if path.is_dir():
        shapes = []
        for prefix in ("train", "t10k"):
            for name in (f"{prefix}-images-idx3-ubyte", f"{prefix}-images-idx3-ubyte.gz"):
                if (path / name).is_file():
                    opener = gzip.open if name.endswith(".gz") else open
                    with opener(path / name, "rb") as f:
                        header = f.read(16)
                    shapes.append(tuple(int(d) for d in np.frombuffer(header[4:16], ">u4")))
                    break
        return shapes or None
    if not zipfile.is_zipfile(path):
        return None
    shapes = []
    with zipfile.ZipFile(path) as archive:
        for key in ("x_train", "x_test"):
            if f"{key}.npy" in archive.namelist():
                with archive.open(f"{key}.npy") as f:
                    version = np.lib.format.read_magic(f)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape = read(f)[0]  # the header only, not the array
                shapes.append(tuple(shape) if len(shape) != 2 else (shape[0], 28, 28))
    return shapes or None


def param_count(scenario: Scenario, shape: Shape) -> int:
    """Parameters of the scenario's model for this data (what ``fred.numerics.models`` builds), as
    its kind counts them: from its layers, or from one trace of a python model."""
    return scenario.model.param_count(shape.feature_shape, shape.outputs)


def estimate(scenario: Scenario, shape: Shape) -> Estimate:
    """The bytes a run holds at its peak, roughly, and what they are."""
    n = scenario.cluster.workers
    p = param_count(scenario, shape)
    params = p * FLOAT
    features = math.prod(shape.feature_shape)
    parts = [
        ("data", shape.examples * features * FLOAT * (1 + shape.load_factor))
    ]  # kept, with its device copy
    if scenario.workload.timing_only:
        parts.append(("parameters", params))
    else:
        per_worker = scenario.strategy.model_copies_per_worker()
        parts.append((f"{n:,} workers x {per_worker} model copies and 4 more", params * (4 + n * per_worker)))
        state = optimizer_state_copies(scenario)
        if state:  # at most one state per worker (all-reduce and gossip replicas); a server holds one
            parts.append((f"optimizer state: {n:,} x {state} model copies", params * n * state))
        if scenario.strategy.reduction == "exact":
            parts.append(_exact_leaves(scenario, params))
        stored = scenario.model.stored_floats(shape.feature_shape, shape.outputs)
        if stored:
            rows = program_rows(scenario)
            parts.append((f"activations of {rows:,} rows", rows * stored * FLOAT))
        width = _width(scenario, shape)
        if width:
            parts.append(("evaluation", eval_chunk_rows(width) * width * FLOAT * 4))
        instructions = gradient_program_size(scenario)
        if instructions:
            parts.append(
                (
                    f"compiling the gradient program (about {instructions:,} XLA instructions)",
                    compile_bytes(instructions),
                )
            )
    return Estimate(sum(b for _, b in parts), parts, p)


def program_rows(scenario: Scenario) -> int:
    """The rows whose activations one gradient program holds: every worker's (fast, one call for
    all), a call's 64-row chunks of per-example gradients, or the tiles of one program."""
    rows = scenario.cluster.workers * scenario.data.batch_size
    if scenario.strategy.reduction != "exact":
        return rows
    if scenario.strategy.exact_tile == 1:
        return min(rows + (-rows) % CHUNK_ROWS, PER_EXAMPLE_ROWS)
    return backward_copies(scenario) * scenario.strategy.exact_tile


def _exact_leaves(scenario: Scenario, params: int) -> tuple[str, float]:
    """The leaves one exact gradient call holds (a call may serve every worker): per-example
    gradients of up to PER_EXAMPLE_ROWS rows, or tile gradients of up to CALL_LEAF_BYTES
    beyond one worker's batch (Numerics.workers_per_call)."""
    batch, tile = scenario.data.batch_size, scenario.strategy.exact_tile
    rows = scenario.cluster.workers * batch
    if tile == 1:
        rows = min(rows + (-rows) % CHUNK_ROWS, PER_EXAMPLE_ROWS)
        return f"per-example gradients of {rows:,} rows", params * rows
    tiles = rows // tile
    held = min(tiles * params, max(CALL_LEAF_BYTES, batch // tile * params))
    return f"tile gradients of {held // params:,.0f} tiles of {tile} rows", held


# The largest program a run compiles is its gradient call's, and what compiling it holds grows with
# the program XLA makes of it (measured on CPU with JAX 0.10, docs/scenarios.md#memory): about
# HLO_PER_LAYER instructions a layer and HLO_BASE more, for every copy of the per-example backward
# pass the call holds (the exact reduction unrolls one per CHUNK_ROWS-row chunk: 4 in a call of 256
# rows), and HLO_PER_UNIT_RUN x k^2 more for each run of k consecutive hidden layers of one unit:
# XLA turns their products into elementwise chains and copies each chain into every fusion of
# the backward pass that reads it. 50 such layers in 4 copies make 232,081 instructions and hold
# 3.4 GB for 45 s of compiling; 30 layers of 64 units in 4 copies, 16,365 and 0.11 GB.
HLO_PER_LAYER, HLO_BASE, HLO_PER_UNIT_RUN = 130, 220, 21
# A tile differentiates its rows' summed loss at once, and XLA copies a run's chains into about
# twice as many fusions of that backward pass: 42 a unit squared, fitted on tiles of 8 rows of an
# MLP [16, 1, 1, 1, 1, 16] (14,458 instructions in 8 copies), within 2 % of a run of 8 not fitted;
# in programs of 4 tiles XLA shares more, and the estimate is high by about 30 %.
HLO_PER_UNIT_RUN_TILE = 42
COMPILE_BYTES_PER_INSTRUCTION = (
    8500  # measured 7-9 kB up to 58,000 instructions, then more a larger program's:
)
COMPILE_GROWTH_FROM, COMPILE_GROWTH_POWER = 58_000, 0.4  # 15 kB each at 232,000


def gradient_program_size(scenario: Scenario) -> int:
    """About how many instructions XLA's optimised gradient program of the run has (0 for a
    model whose layers fred cannot see)."""
    model = scenario.model
    layers = model.program_layers()
    if not layers:
        return 0
    tiles = scenario.strategy.reduction == "exact" and scenario.strategy.exact_tile > 1
    per_run = HLO_PER_UNIT_RUN_TILE if tiles else HLO_PER_UNIT_RUN
    one = HLO_PER_LAYER * layers + HLO_BASE + per_run * sum(k * k for k in unit_runs(model))
    return one * backward_copies(scenario)


def unit_runs(model: ModelSection) -> list[int]:
    """The lengths of the runs of consecutive hidden layers of one unit."""
    runs, k = [], 0
    for width in [*model.hidden_units(), 0]:
        if width == 1:
            k += 1
        elif k:
            runs, k = [*runs, k], 0
    return runs


def backward_copies(scenario: Scenario) -> int:
    """Copies of the backward pass in the largest gradient program: with per-example leaves one
    per CHUNK_ROWS-row chunk of a call (which serves up to CALL_ROWS rows' workers at once); with
    tiles one per tile in a program (Numerics.tiles_per_program: a power of two whose tiles' jaxpr
    equations stay under PROGRAM_EQUATIONS); one for a fast call."""
    if scenario.strategy.reduction != "exact":
        return 1
    batch, tile = scenario.data.batch_size, scenario.strategy.exact_tile
    rows = min(scenario.cluster.workers, max(1, CALL_ROWS // batch)) * batch
    if tile == 1:
        return -(-rows // CHUNK_ROWS)
    most = CALL_ROWS // tile
    equations = scenario.model.tile_equations()
    if equations:
        most = min(most, max(1, PROGRAM_EQUATIONS // equations))
    return min(rows // tile, 1 << (most.bit_length() - 1))


def compile_bytes(instructions: int) -> float:
    """What compiling a program of ``instructions`` holds at its peak, roughly."""
    return (
        COMPILE_BYTES_PER_INSTRUCTION
        * instructions
        * max(1.0, instructions / COMPILE_GROWTH_FROM) ** COMPILE_GROWTH_POWER
    )


def optimizer_state_copies(scenario: Scenario) -> int:
    """Parameter-sized arrays an optimizer keeps: Adam's two moments, SGD's momentum, plain SGD none."""
    optimizer = getattr(scenario.strategy, "optimizer", None)
    kind = getattr(optimizer, "kind", "sgd")
    if kind in ("adam", "adamw"):
        return 2
    return 1 if getattr(optimizer, "momentum", 0.0) else 0


ZERO_STAGES = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}


def worker_memory(scenario: Scenario, param_bytes: float | None = None) -> dict[str, float] | None:
    """The model states one worker holds on its device, in bytes, as ZeRO's stages shard them
    (Rajbhandari et al. 2020, section 5): the optimizer state split over the ``n`` workers under
    ``strategy.sharding: zero1``, the gradients too under ``zero2``, the parameters too under
    ``zero3``; whole on every worker without sharding. Parameters and gradients are the run's
    message (``param_bytes``: the workload's, or float32 of the model's); the optimizer state is
    :func:`optimizer_state_copies` of it (Adam: 2). Activations, buffers and the gathered layers
    of ZeRO-3 are not counted. Without ``param_bytes`` it is worked out from the scenario alone,
    before a run (None: a model whose size only its data tells)."""
    if param_bytes is None:
        param_bytes = _message_bytes(scenario)
        if param_bytes is None:
            return None
    n, stage = scenario.cluster.workers, ZERO_STAGES[getattr(scenario.strategy, "sharding", "none")]
    parts = {
        "parameters": param_bytes / n if stage >= 3 else param_bytes,
        "gradients": param_bytes / n if stage >= 2 else param_bytes,
        "optimizer_state": optimizer_state_copies(scenario) * param_bytes / (n if stage >= 1 else 1),
    }
    return {**parts, "total": sum(parts.values())}


def _message_bytes(scenario: Scenario) -> float | None:
    """The run's message: the workload's bytes, or float32 of the model's parameters for its data."""
    given = scenario.workload.resolved_param_bytes()
    if given is not None:
        return given
    shape = data_shape(scenario)
    if shape is None or not scenario.model.takes(shape.feature_shape):
        return None
    return FLOAT * param_count(scenario, shape)


def _width(scenario: Scenario, shape: Shape) -> int:
    """The most floats one example holds in the model (0: a python model fred cannot trace)."""
    return scenario.model.activation_width(shape.feature_shape, shape.outputs)


def memory_limit() -> tuple[float, str]:
    """Bytes a run may use, and where that number comes from."""
    given = os.environ.get(ENV)
    if given is not None:
        try:
            gb = float(given)
        except ValueError:
            gb = math.nan
        if not (gb > 0 and math.isfinite(gb)):
            raise ValueError(f"{ENV}={given!r}: give the memory fred may use, in GB, e.g. {ENV}=64")
        return gb * GB, f"the limit set ({ENV} or --memory-limit-gb)"
    available = _meminfo_available()
    source = "available (MemAvailable in /proc/meminfo)"
    if available is None:
        try:
            available = float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            source = "available (free physical memory)"
        except (ValueError, OSError, AttributeError):
            return math.inf, "unknown"
    cgroup = _cgroup_room()
    if cgroup is not None and cgroup < available:
        available, source = cgroup, "left under this container's memory limit (cgroup memory.max)"
    for room, said in _rlimit_rooms():
        if room < available:
            available, source = room, said
    return max(available, 0.0), source


RUNNING_RESERVE = (
    0.5 * GB
)  # address space a run maps beyond its libraries' (threads' stacks and malloc arenas; measured ~0.25 GB)
RLIMITS = (  # (resource name, /proc/self/status field it is held to, how people set it)
    ("RLIMIT_AS", "VmSize", "address-space limit (ulimit -v, RLIMIT_AS)"),
    ("RLIMIT_DATA", "VmData", "data-size limit (ulimit -d, RLIMIT_DATA)"),
)


def _rlimit_rooms() -> list[tuple[float, str]]:
    """What is left under this process's address-space and data-size limits, if any is set.

    These count address space mapped, not memory used: JAX's CPU backend and pyarrow's allocator
    map about 1 GB each that they may never fill (with JAX 0.4-0.6 and pyarrow's mimalloc), so
    both are brought up first, as the run would, and what the process then holds is left out."""
    import resource

    limited = [(resource.getrlimit(getattr(resource, name))[0], field, said) for name, field, said in RLIMITS]
    limited = [(soft, field, said) for soft, field, said in limited if soft != resource.RLIM_INFINITY]
    if not limited:
        return []
    _map_libraries()
    rooms = []
    for soft, field, said in limited:
        held = _status_bytes(field)
        if held is None:
            continue
        rooms.append(
            (
                soft - held - RUNNING_RESERVE,
                f"left under this process's {said} of {_gb(soft)}, after the {_gb(held)} it holds (JAX, "
                f"pyarrow and Python mapped) and {_gb(RUNNING_RESERVE)} for a run's threads",
            )
        )
    return rooms


def _map_libraries() -> None:
    """Map what every run maps anyway (JAX's CPU backend, pyarrow's memory pool), so that the
    room measured under an address-space limit is the room the run will have."""
    import jax
    import pyarrow

    jax.devices("cpu")
    pyarrow.allocate_buffer(1)


def _status_bytes(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _meminfo_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> float | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        return float(limit) - float(used) if limit != "max" else None
    except (OSError, ValueError):
        return None


def check_fits(scenario: Scenario) -> Fit | None:
    """Refuse a run whose memory estimate exceeds the limit, before it loads or compiles anything;
    what was found, for the message of an allocation that fails anyway (None: nothing estimated)."""
    shape = data_shape(scenario)
    model = scenario.model
    if shape is None or not model.takes(shape.feature_shape):
        return None  # building it says what is wrong (data of a shape the model does not take)
    found = estimate(scenario, shape)
    limit, source = memory_limit()
    if found.total <= limit:
        return Fit(found.total, limit, source)
    parts = ", ".join(f"{what} {_gb(b)}" for what, b in found.parts if b >= 0.01 * found.total)
    if not model.layers_known and not any(what == "evaluation" for what, _ in found.parts):
        parts += "; not counting the model's activations, which fred could not trace"
    fixes = "make the data set smaller"
    compiling = sum(b for what, b in found.parts if what.startswith("compiling"))
    if compiling > 0.5 * found.total:
        runs = unit_runs(model)
        fixes = (
            "give hidden layers of at least 2 units, or fewer of 1 unit in a row (a run of k layers of 1 "
            "unit compiles "
            "to a program that grows as k squared), or fewer layers"
            if runs and max(runs) >= 10
            else "give fewer layers"
        )
        if backward_copies(scenario) > 1:
            fixes += (
                ", or strategy.reduction: fast (one copy of the backward pass in the program, not one per "
                "leaf chunk or tile)"
            )
    elif found.parts[0][1] < 0.5 * found.total:
        leaves = sum(b for what, b in found.parts if what.startswith(("per-example", "tile gradients")))
        fixes = "give fewer workers or a smaller model" + (
            ", or strategy.reduction: fast" if leaves > 0.25 * found.total else ""
        )
    raise_limit = "raise the limit" + (" (ulimit -v or -d) or give it" if "ulimit" in source else "")
    raise TooLarge(
        f"out of memory: this run would hold about {_gb(found.total)} (a model of {found.params:,} "
        "parameters, "
        f"{_gb(found.params * FLOAT)} a copy; {parts}), and {_gb(limit)} is {source}; {fixes}. On a machine "
        f"that has more, {raise_limit}: fred run --memory-limit-gb N, or {ENV}=N"
    )


def _gb(count: float) -> str:
    return f"{count / GB:.3g} GB"


def allocation_failed(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: numpy's MemoryError, or XLA's ``Out of memory
    allocating N bytes`` (an INTERNAL error) or RESOURCE_EXHAUSTED, raised wherever JAX computes."""
    if isinstance(err, MemoryError):
        return True
    text = str(err)
    return type(err).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and (
        "out of memory" in text.lower() or "RESOURCE_EXHAUSTED" in text or "bad_alloc" in text
    )


def out_of_memory(err: BaseException, fit: Fit | None, where: str) -> str:
    """One line for an allocation that failed ``where``: what failed, the estimate and the limit
    it was held to, and what to do."""
    said = f"out of memory {where} ({_allocation(err)})"
    if fit is None:
        return (
            f"{said}; fred could not estimate this run's memory beforehand: give fewer workers, a smaller "
            "model "
            f"or a smaller data set"
        )
    said += f": fred estimated the run at about {_gb(fit.estimate)}, and {_gb(fit.limit)} is {fit.source}"
    if fit.source.startswith("the limit set"):
        return (
            f"{said}, perhaps more than this process can have: give the memory it really has, fred run "
            f"--memory-limit-gb N (or {ENV}=N), so that a run estimated not to fit is refused before it "
            "starts; "
            f"or give fewer workers or a smaller model"
        )
    return (
        f"{said}; the run needed more than the estimate: give fewer workers or a smaller model, or run it "
        f"where more memory is free (fred run --memory-limit-gb N sets the limit estimates are held to)"
    )


def _allocation(err: BaseException) -> str:
    """What failed, in a few words: XLA's line naming the bytes, without its "Error dispatching
    computation:" prefixes, or numpy's message."""
    text = str(err).strip() or type(err).__name__
    for line in text.splitlines():
        if "out of memory" in line.lower() or "RESOURCE_EXHAUSTED" in line or "bad_alloc" in line:
            text = line
            break
    start = text.lower().find("out of memory")
    return (text[start:] if start > 0 else text.splitlines()[0]).strip().rstrip(".")[:200]
