"""CIFAR-10 and CIFAR-100 from the folders a user downloads (the "python version" of
https://www.cs.toronto.edu/~kriz/cifar.html): ``cifar-10-batches-py`` (``data_batch_1`` to
``data_batch_5``, ``test_batch``) and ``cifar-100-python`` (``train``, ``test``).

Each file is a Python pickle of a dict: ``data``, a ``uint8`` array of ``(N, 3072)`` pixels (the
red plane, then green, then blue, each 32 x 32 in row order), and the labels, a list of ``N``
integers (``labels`` in CIFAR-10, ``fine_labels`` and ``coarse_labels`` in CIFAR-100). A pickle
can name any Python function to call, so these are read with an unpickler that knows only what
such a file needs (numpy's array and dtype reconstruction, and the latin-1 encoding of bytes a
Python 3 pickle of protocol 2 uses) and refuses any other name, saying which and in what file.

Pixels become float32 in [0, 1] of shape ``(32, 32, 3)`` (height, width, channels). The official
test split is the eval set (capped by ``data.eval_examples``); a folder without it holds out
``data.eval_fraction`` of the training images, as the MNIST loader does.
"""

from __future__ import annotations

import codecs
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from fred.scenario.schema import CIFAR10Data, CIFAR100Data

try:  # numpy's array reconstruction, which array pickles of protocols 2 to 4 name
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy 1
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

SIDE, CHANNELS = 32, 3
PIXELS = SIDE * SIDE * CHANNELS
MAX_FILE_BYTES = 512 * 2**20  # an official batch is 31 MB (CIFAR-100's train, 155 MB)
LAYOUTS = {  # kind: (folder, training files, test file)
    "cifar10": ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch"),
    "cifar100": ("cifar-100-python", ("train",), "test"),
}
DOWNLOAD = "https://www.cs.toronto.edu/~kriz/cifar.html"

Pair = tuple[np.ndarray, np.ndarray]


def classes(cfg: CIFAR10Data | CIFAR100Data) -> int:
    if isinstance(cfg, CIFAR10Data):
        return 10
    return 100 if cfg.labels == "fine" else 20


def read(cfg: CIFAR10Data | CIFAR100Data) -> tuple[Pair, Pair | None]:
    """The training images and labels (every training file, in order), and the test split's
    (None when the folder has no test file)."""
    folder = find_folder(cfg)
    _, train_names, test_name = LAYOUTS[cfg.kind]
    missing = [name for name in train_names if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)}: a {_title(cfg)} folder holds "
            f"{', '.join(train_names)} and {test_name}, as {LAYOUTS[cfg.kind][0]} extracts from the download "
            f"({DOWNLOAD})"
        )
    parts = [_read_batch(folder / name, cfg) for name in train_names]
    train = (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
    test = _read_batch(folder / test_name, cfg) if (folder / test_name).is_file() else None
    return train, test


def find_folder(cfg: CIFAR10Data | CIFAR100Data) -> Path:
    """``path``, or the official folder inside it (the folder the archive was extracted into)."""
    path = Path(cfg.path).expanduser()
    name = LAYOUTS[cfg.kind][0]
    if (path / name).is_dir():
        return path / name
    if path.is_dir():
        return path
    what = "is not a folder" if path.exists() else "does not exist"
    raise FileNotFoundError(
        f"{_title(cfg)} folder {path} {what}; download the python version ({DOWNLOAD}), "
        f"extract it, and give the {name} folder it makes"
    )


def _title(cfg: CIFAR10Data | CIFAR100Data) -> str:
    return "CIFAR-10" if isinstance(cfg, CIFAR10Data) else "CIFAR-100"


def _read_batch(path: Path, cfg: CIFAR10Data | CIFAR100Data) -> Pair:
    """One file's images ``(N, 32, 32, 3)`` float32 in [0, 1] and labels ``(N,)`` int32, checked."""
    batch = load_pickle(path)
    if not isinstance(batch, dict):
        raise ValueError(f"{path} holds a {type(batch).__name__}, not the dict of a {_title(cfg)} batch")
    batch = {key.decode("latin-1") if isinstance(key, bytes) else key: value for key, value in batch.items()}
    label_key = "labels" if isinstance(cfg, CIFAR10Data) else f"{cfg.labels}_labels"
    for key in ("data", label_key):
        if key not in batch:
            found = ", ".join(sorted(map(str, batch))) or "nothing"
            raise ValueError(f"{path} has no '{key}' entry (it has {found}); is it a {_title(cfg)} batch?")
    data = batch["data"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != PIXELS
    ):
        shape = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ValueError(
            f"{path}: 'data' is {shape}; a {_title(cfg)} batch holds uint8 pixels of shape (N, {PIXELS})"
        )
    labels = _labels(path, batch[label_key], label_key, len(data), classes(cfg))
    images = data.reshape(-1, CHANNELS, SIDE, SIDE).transpose(0, 2, 3, 1).astype(np.float32) / np.float32(
        255.0
    )
    return images, labels


def _labels(path: Path, value: Any, key: str, count: int, n_classes: int) -> np.ndarray:
    try:
        labels = np.asarray(value)
    except (TypeError, ValueError) as err:  # ragged or odd objects
        raise ValueError(f"{path}: '{key}' cannot be read as labels ({err})") from None
    if labels.shape != (count,) or labels.dtype.kind not in "iu":
        raise ValueError(
            f"{path}: '{key}' is {labels.dtype} {labels.shape}; it needs {count} integers, one per image"
        )
    if count and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{path}: '{key}' holds labels outside 0..{n_classes - 1}")
    return labels.astype(np.int32)


# ----------------------------------------------------------------------------- the restricted pickle reader
def _frombuffer(buffer: bytes, dtype: Any, shape: tuple[int, ...], order: str) -> np.ndarray:
    """How protocol 5 writes an array: its bytes, then numpy's ``_frombuffer`` (a copy: writable)."""
    return np.frombuffer(buffer, dtype=_dtype(dtype)).reshape(shape, order=order).copy()


class Refused(pickle.UnpicklingError):
    """A pickle that asks for something a CIFAR batch never holds."""


def _dtype(*args: Any) -> np.dtype:
    """numpy.dtype, of plain numbers only: an object array would hold whatever the pickle made."""
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise Refused(f"an array of Python objects ({dtype}); a CIFAR batch holds numbers")
    return dtype


def _encode(text: str, encoding: str = "latin1") -> bytes:
    """How a Python 3 pickle of protocol 2 writes bytes: ``_codecs.encode(text, 'latin1')``."""
    if not isinstance(text, str) or codecs.lookup(encoding).name != "iso8859-1":
        raise Refused(f"_codecs.encode with {encoding!r}; only latin-1 text becomes bytes in a batch")
    return text.encode("latin-1")


ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # numpy 1 pickles (and the official files)
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # numpy 2 pickles
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,  # protocol 5
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _encode,
}


class _BatchUnpickler(pickle.Unpickler):
    """Resolves only the names in :data:`ALLOWED`; any other is refused before it is imported."""

    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED.get((module, name))
        if found is None:
            raise Refused(
                f"it names {module}.{name}, which a CIFAR batch never does "
                "(it holds numpy arrays, lists, numbers and bytes); refused unread"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise Refused("it refers to persistent objects, which a CIFAR batch never does")


def load_pickle(path: Path) -> Any:
    """The object pickled in ``path``, read with the restricted unpickler (Python 2's strings as bytes)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path} is {size / 2**20:.0f} MiB; a CIFAR batch is at most about 160 MiB")
    raw = path.read_bytes()
    try:
        return _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Refused as err:
        raise ValueError(f"{path}: not read as a CIFAR batch: {err}") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        UnicodeDecodeError,
    ) as err:
        raise ValueError(
            f"{path} is not a CIFAR batch (a Python pickle of a dict of pixels and labels): "
            f"{type(err).__name__}: {str(err)[:200]}"
        ) from None
