"""Data sets from the user's files (``data.source: {kind: arrays}``), read and checked.

Four formats, told apart by what ``path`` is:

- an ``.npz`` file (``numpy.savez``): ``x`` and ``y`` are keys. A member stored uncompressed
  (``savez``) is memory-mapped; a compressed one (``savez_compressed``) is read whole.
- a folder of ``.npy`` files: ``x`` and ``y`` are file stems (``x.npy``); memory-mapped.
- a Parquet file: ``x`` is a column (a list column, for an example of several numbers) or
  a list of scalar columns (tabular data); read whole, column by column.
- a folder written by Hugging Face ``datasets``' ``save_to_disk`` (a ``Dataset``, one split):
  ``x`` and ``y`` are columns; its Arrow file is memory-mapped, the columns copied as read.

Every check names the file, the key and the fix, and reads a memory-mapped array in chunks,
so checking a large file does not load it whole.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from fred.scenario.schema import ArraysData

Pair = tuple[np.ndarray, np.ndarray]
CHUNK_BYTES = 64 * 2**20  # read a memory-mapped array this much at a time when checking it
SHOWN = 5  # rows named in a message
FORMATS = (
    "an .npz file, a folder of .npy files, a .parquet file, or a folder written by datasets' save_to_disk"
)


def read_arrays(cfg: ArraysData) -> tuple[Pair, Pair | None, int]:
    """The training pair, the eval pair (None without ``eval_path``) and the number of classes
    (0 for regression), or a ``ValueError``/``FileNotFoundError`` that says what to fix."""
    train = _pair(cfg, Path(cfg.path).expanduser(), "data.source.path")
    held = _pair(cfg, Path(cfg.eval_path).expanduser(), "data.source.eval_path") if cfg.eval_path else None
    if held is None and len(train[0]) < 2:
        raise ValueError(
            f"data.source.path: {cfg.path} holds {len(train[0])} example{'s' * (len(train[0]) != 1)}; give "
            "at least 2 (one is held "
            "out for evaluation), or the eval set in data.source.eval_path"
        )
    if held is not None and held[0].shape[1:] != train[0].shape[1:]:
        raise ValueError(
            f"data.source.eval_path: its examples are of shape {held[0].shape[1:]} but the training "
            f"examples' are {train[0].shape[1:]}; both splits need one shape"
        )
    classes = 0
    if cfg.task == "classification":
        classes = _classes(cfg, train, held)
    return train, held, classes


def _pair(cfg: ArraysData, path: Path, field: str) -> Pair:
    x_name, y_name = cfg.x, cfg.y
    x, y = _read(path, field, x_name, y_name)
    where = f"{field}: {path}"
    if len(x) == 0 or len(y) == 0:
        raise ValueError(
            f"{where} holds no examples ({x_name}: {x.shape[0]} rows, {y_name}: {y.shape[0]}); "
            "an empty split can neither train nor be evaluated on"
        )
    if len(x) != len(y):
        raise ValueError(
            f"{where}: {_label(x_name)} has {len(x)} rows but {y_name!r} has {len(y)}; give one label per "
            "example"
        )
    if x.ndim < 2:
        raise ValueError(
            f"{where}: {_label(x_name)} has shape {x.shape}; give each example as an array, shape "
            "(N, features) or (N, H, W, C)"
        )
    if y.ndim > 2 or (y.ndim == 2 and y.shape[1] != 1):  # one-hot rows would read as several labels
        raise ValueError(
            f"{where}: {y_name!r} has shape {y.shape}; give one label or target per example, (N,) or (N, 1)"
            " (class numbers, not one-hot rows)"
        )
    _numbers(x, f"{where}: {_label(x_name)}", "b")
    _numbers(y, f"{where}: {y_name!r}", "")
    y = y.reshape(-1)
    bad = _nonfinite_rows(x) | _nonfinite_rows(y)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise ValueError(
            f"{where}: {len(rows):,} of {len(x):,} rows hold NaN or infinite values (rows "
            f"{_list(rows)}); drop or fix them"
        )
    if cfg.task == "classification":
        fractional = np.flatnonzero(y != np.round(y)) if y.dtype.kind == "f" else np.zeros(0, np.int64)
        if len(fractional):
            raise ValueError(
                f"{where}: {y_name!r} holds {len(fractional):,} labels that are not whole numbers (rows "
                f"{_list(fractional)}); classification needs class numbers 0, 1, ..., or set task: regression"
            )
        y = y.astype(np.int64)
    x = x.astype(np.float32, copy=False)  # a float32 memory map stays one
    y = y.astype(np.int32) if cfg.task == "classification" else y.astype(np.float32)
    return x, y


def _label(name: str | list[str]) -> str:
    return repr(name) if isinstance(name, str) else f"columns {name}"


def _numbers(array: np.ndarray, what: str, also: str) -> None:
    if array.dtype.kind not in "uif" + also:
        raise ValueError(f"{what} holds {array.dtype} values; it needs numbers (integers or floats)")


def _nonfinite_rows(array: np.ndarray) -> np.ndarray:
    """Which rows hold a NaN or an infinity, reading ``array`` a chunk at a time."""
    bad = np.zeros(len(array), bool)
    if array.dtype.kind != "f":
        return bad
    per_row = max(array[:1].nbytes, 1)
    step = max(1, CHUNK_BYTES // per_row)
    for start in range(0, len(array), step):
        chunk = np.asarray(array[start : start + step])
        bad[start : start + step] = ~np.isfinite(chunk.reshape(len(chunk), -1)).all(axis=1)
    return bad


def _list(rows: np.ndarray) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:SHOWN])
    return shown + (", ..." if len(rows) > SHOWN else "")


def _classes(cfg: ArraysData, train: Pair, held: Pair | None) -> int:
    labels = [(f"data.source.path: {cfg.path}", train[1])]
    if held is not None:
        labels.append((f"data.source.eval_path: {cfg.eval_path}", held[1]))
    classes = cfg.classes
    if classes is None:
        classes = int(max(y.max() for _, y in labels)) + 1
        if classes < 2:
            raise ValueError(
                f"data.source.path: {cfg.path}: every label in {cfg.y!r} is {classes - 1}: one class has "
                "nothing to "
                "tell apart; check data.source.y, or set task: regression"
            )
    for field, y in labels:
        out = np.flatnonzero((y < 0) | (y >= classes))
        if len(out):
            given = f"classes is {classes}" if cfg.classes is not None else f"{classes} classes"
            raise ValueError(
                f"{field}: {len(out):,} label{'s' * (len(out) != 1)} in {cfg.y!r} "
                f"{'are' if len(out) != 1 else 'is'} outside 0..{classes - 1} ({given}; rows "
                f"{_list(out)} hold {_list(y[out])}); renumber the classes from 0, or set data.source.classes"
            )
    return classes


# ----------------------------------------------------------------------------- formats
def _read(path: Path, field: str, x: str | list[str], y: str) -> Pair:
    """``x`` and ``y`` from ``path``, in whichever format it is."""
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
            raise ValueError(
                f"{field}: {path} holds several splits ({', '.join(splits)}); name one folder: "
                f"path: {path / (splits[0] if splits else 'train')}, and the held-out one as eval_path"
            )
        if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
            return _columns(_hf_table(path, field, _names(x) + [y]), path, field, x, y)
        if any(path.glob("*.npy")):
            return _one_name(x, path, field, lambda key: _npy(path, key, field)), _npy(path, y, field)
        raise ValueError(
            f"{field}: {path} is a folder without .npy files or a datasets save_to_disk folder; give "
            f"{FORMATS}"
        )
    if not path.exists():
        raise FileNotFoundError(f"{field}: {path} does not exist; give {FORMATS}")
    if zipfile.is_zipfile(path):
        return _one_name(x, path, field, lambda key: _npz(path, key, field)), _npz(path, y, field)
    if _is_parquet(path):
        return _columns(_parquet_table(path, field, _names(x) + [y]), path, field, x, y)
    raise ValueError(f"{field}: {path} is neither an .npz (zip) file nor a Parquet file; give {FORMATS}")


def _names(x: str | list[str]) -> list[str]:
    return [x] if isinstance(x, str) else list(x)


def _one_name(x: str | list[str], path: Path, field: str, read: Any) -> np.ndarray:
    if not isinstance(x, str):
        raise ValueError(f"{field}: {path} holds arrays, not columns: give data.source.x one key, not {x}")
    return read(x)


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def _npy(folder: Path, key: str, field: str) -> np.ndarray:
    file = folder / f"{key}.npy"
    if not file.is_file():
        stems = sorted(p.stem for p in folder.glob("*.npy"))
        raise ValueError(
            f"{field}: {folder} has no {key}.npy; it has {', '.join(stems)} (set data.source.x and y to them)"
        )
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"{field}: {file} is not a readable .npy file of numbers: {err}") from None


def _npz(path: Path, key: str, field: str) -> np.ndarray:
    """``key`` of an .npz: memory-mapped when stored uncompressed, read whole otherwise."""
    with zipfile.ZipFile(path) as archive:
        members = [n.removesuffix(".npy") for n in archive.namelist()]
        if key not in members:
            raise ValueError(
                f"{field}: {path} has no key {key!r}; it has {', '.join(members)} (set data.source.x and y "
                "to them)"
            )
        info = archive.getinfo(f"{key}.npy")
    try:
        if info.compress_type == zipfile.ZIP_STORED:
            return _mapped_member(path, info)
        with np.load(path, allow_pickle=False) as archive:
            return archive[key]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(
            f"{field}: {path}: {key!r} cannot be read ({err}); write arrays of numbers with numpy.savez"
        ) from None


def _mapped_member(path: Path, info: zipfile.ZipInfo) -> np.ndarray:
    """An uncompressed .npz member as a read-only memory map of the .npz file itself."""
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)  # the member's local header: its name and extra field lengths are at 26 and 28
        start = (
            info.header_offset
            + 30
            + int.from_bytes(local[26:28], "little")
            + int.from_bytes(local[28:30], "little")
        )
        f.seek(start)
        shape, fortran, dtype = _array_header(f)
        offset = f.tell()
    if dtype.hasobject:
        raise ValueError("it holds Python objects, not numbers")
    if 0 in shape:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype, "r", offset, shape, "F" if fortran else "C")


def _array_header(f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """An .npy header's (shape, Fortran order, dtype), leaving ``f`` at the data."""
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return read(f)


def _parquet_table(path: Path, field: str, names: list[str]) -> Any:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as err:  # pyarrow's errors have no common base but Exception
        raise ValueError(f"{field}: {path} is not a readable Parquet file: {err}") from None
    _have(schema.names, names, path, field)
    return pq.read_table(path, columns=names)


def _hf_table(path: Path, field: str, names: list[str]) -> Any:
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"{field}: {path} was written by Hugging Face datasets, which is not installed: "
            "pip install 'fred[hf]'"
        ) from None
    try:
        found = datasets.load_from_disk(str(path))
    except Exception as err:
        raise ValueError(f"{field}: {path} cannot be read by datasets.load_from_disk: {err}") from None
    _have(found.column_names, names, path, field)
    return found.with_format("arrow", columns=names)[
        :
    ]  # the rows in the dataset's order, from its mapped file


def _have(columns: list[str], names: list[str], path: Path, field: str) -> None:
    missing = [n for n in names if n not in columns]
    if missing:
        raise ValueError(
            f"{field}: {path} has no column {', '.join(map(repr, missing))}; it has "
            f"{', '.join(columns)} (set data.source.x and y to them)"
        )


def _columns(table: Any, path: Path, field: str, x: str | list[str], y: str) -> Pair:
    return _features(table, path, field, x), _column(table, y, path, field)


def _features(table: Any, path: Path, field: str, x: str | list[str]) -> np.ndarray:
    """Column ``x``, or the scalar columns ``x`` side by side (tabular data)."""
    if isinstance(x, str):
        return _column(table, x, path, field)
    parts = [_column(table, name, path, field) for name in x]
    wide = [name for name, part in zip(x, parts) if part.ndim != 1]
    if wide:
        raise ValueError(
            f"{field}: {path}: columns {wide} hold several numbers a row; several x columns must "
            "each hold one (or give one list column as x)"
        )
    return np.stack(parts, axis=1)


def _column(table: Any, name: str, path: Path, field: str) -> np.ndarray:
    """A column as an array: a list column's rows, all of one length, become an array's rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name).combine_chunks()
    shape = [len(column)]
    while (
        pa.types.is_list(column.type)
        or pa.types.is_large_list(column.type)
        or pa.types.is_fixed_size_list(column.type)
    ):
        _no_nulls(column, name, path, field)
        lengths = np.unique(pc.list_value_length(column).to_numpy(zero_copy_only=False))
        if len(lengths) > 1:
            raise ValueError(
                f"{field}: {path}: column {name!r} holds lists of {len(lengths)} lengths "
                f"({_list(lengths)}); every example needs the same shape"
            )
        shape.append(int(lengths[0]) if len(lengths) else 0)
        column = column.flatten()
    _no_nulls(column, name, path, field)
    if not (
        pa.types.is_integer(column.type)
        or pa.types.is_floating(column.type)
        or pa.types.is_boolean(column.type)
    ):
        raise ValueError(
            f"{field}: {path}: column {name!r} holds {column.type} values; it needs numbers (integers or "
            "floats)"
        )
    return column.to_numpy(zero_copy_only=False).reshape(shape)


def _no_nulls(column: Any, name: str, path: Path, field: str) -> None:
    if column.null_count:
        rows = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
        raise ValueError(
            f"{field}: {path}: column {name!r} has {column.null_count:,} missing (null) values "
            f"(at {_list(rows)}); drop or fill them"
        )


# ----------------------------------------------------------------------------- shapes
def arrays_shape(cfg: ArraysData) -> tuple[int, tuple[int, ...], int] | None:
    """Examples (both splits), one example's shape and the outputs a model needs, from the
    files' headers, one example and the labels, without loading the features; None when the
    files cannot tell (reading them then says what is wrong)."""
    try:
        total, feature_shape, outputs = 0, None, 1
        for path in [cfg.path] + ([cfg.eval_path] if cfg.eval_path else []):
            rows, shape, y = _header(Path(path).expanduser(), cfg.x, cfg.y)
            total += rows
            feature_shape = feature_shape or shape
            if cfg.task == "classification":
                outputs = max(outputs, cfg.classes or int(np.max(y)) + 1)
        return total, feature_shape, outputs
    except Exception:  # whatever it is, the loader says it properly
        return None


def _header(path: Path, x: str | list[str], y: str) -> tuple[int, tuple[int, ...], np.ndarray]:
    field = "data.source.path"
    if path.is_dir() and (path / "state.json").is_file():
        import datasets

        table = _hf_table(path, field, [y])
        first = datasets.load_from_disk(str(path)).with_format("arrow", columns=_names(x))[:1]
        return len(table), _features(first, path, field, x).shape[1:], _column(table, y, path, field)
    if path.is_dir():
        features, labels = _read(path, field, x, y)  # memory maps: nothing is read but the labels
        return len(features), tuple(features.shape[1:]), labels
    if zipfile.is_zipfile(path):
        features = _npz_header(path, x)
        return len(features), tuple(features.shape[1:]), _npz(path, y, field)
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    first = pa.Table.from_batches([next(parquet.iter_batches(batch_size=1, columns=_names(x)))])
    labels = _column(pq.read_table(path, columns=[y]), y, path, field)
    return parquet.metadata.num_rows, _features(first, path, field, x).shape[1:], labels


def _npz_header(path: Path, key: str | list[str]) -> np.ndarray:
    """An array of ``key``'s shape and no data (a member's header, not its values)."""
    with zipfile.ZipFile(path) as archive, archive.open(f"{key}.npy") as f:
        shape = _array_header(f)[0]
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, [0] * len(shape))
