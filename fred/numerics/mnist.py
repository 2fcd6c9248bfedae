"""MNIST's files, read as they are distributed: a directory of IDX files (``train-images-idx3-ubyte``
and its labels, optionally ``.gz``, and the ``t10k`` pair for the test split) or one ``.npz`` file.
Nothing is downloaded."""

from __future__ import annotations

import gzip
import zipfile
import zlib
from pathlib import Path

import numpy as np

IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension
MNIST_CLASSES = 10

Pair = tuple[np.ndarray, np.ndarray]


def image_size(images: np.ndarray) -> str:
    """An image's height and width as a person reads them: ``28 x 28``."""
    return " x ".join(map(str, images.shape[1:3]))


def read(path: Path) -> tuple[Pair, Pair | None]:
    """The train pair (images, labels) and the test pair (None where the files have none) at ``path``."""
    if path.is_dir():
        return _read_idx_dir(path)
    if path.is_file():
        return _read_npz(path)
    raise FileNotFoundError(
        f"{path} does not exist; expected a directory of MNIST IDX files "
        f"(train-images-idx3-ubyte, train-labels-idx1-ubyte, optionally .gz) or one .npz file"
    )


def _read_idx_dir(directory: Path) -> tuple[Pair, Pair | None]:
    """The train pair (required) and the t10k pair (optional, but both files or neither)."""
    train = _read_idx_pair(directory, "train")
    test_files = [_find_idx(directory, f"t10k-{kind}") for kind in ("images-idx3-ubyte", "labels-idx1-ubyte")]
    if all(f is None for f in test_files):
        return train, None
    if any(f is None for f in test_files):
        present = next(f for f in test_files if f is not None)
        raise FileNotFoundError(
            f"{present} has no partner in {directory}: the t10k images and labels come as a pair"
        )
    return train, _read_idx_pair(directory, "t10k")


def _read_idx_pair(directory: Path, prefix: str) -> Pair:
    images_file = _require_idx(directory, f"{prefix}-images-idx3-ubyte")
    labels_file = _require_idx(directory, f"{prefix}-labels-idx1-ubyte")
    images = _parse_idx(images_file, IDX_IMAGES_MAGIC, "images")
    labels = _parse_idx(labels_file, IDX_LABELS_MAGIC, "labels")
    if len(images) != len(labels):
        raise ValueError(
            f"{images_file} holds {len(images)} images but {labels_file} holds {len(labels)} labels"
        )
    return _mnist_pixels(images, images_file), _mnist_labels(labels, labels_file)


def _find_idx(directory: Path, name: str) -> Path | None:
    """``name`` or ``name.gz`` in ``directory``, preferring the uncompressed file."""
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _require_idx(directory: Path, name: str) -> Path:
    found = _find_idx(directory, name)
    if found is None:
        raise FileNotFoundError(f"missing MNIST file {directory / name} (or {name}.gz) in {directory}")
    return found


def _parse_idx(path: Path, magic: int, what: str) -> np.ndarray:
    """Parse one IDX file of unsigned bytes, checking the magic number and the declared size."""
    raw = _read_bytes(path)
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(
            f"{path} is too short for an IDX {what} header ({len(raw)} bytes, expected at least {header})"
        )
    found = int(np.frombuffer(raw, ">u4", count=1)[0])
    if found != magic:
        raise ValueError(f"{path} has magic number 0x{found:08x}; expected 0x{magic:08x} (IDX {what} file)")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape))
    if len(raw) != expected:
        raise ValueError(f"{path} is {len(raw)} bytes; its header {shape} says it should be {expected}")
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped if it ends in ``.gz``; a corrupt archive names the file."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"{path} is not a readable gzip file: {err}") from err


def _read_npz(path: Path) -> tuple[Pair, Pair | None]:
    """``x_train``/``y_train`` and, if both are present, ``x_test``/``y_test``."""
    if not zipfile.is_zipfile(path):  # np.load would call any other file pickled data
        raise ValueError(
            f"{path} is not a .npz file (not a zip archive); write one with numpy.savez(path, x_train=..., "
            "y_train=...)"
        )
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is not a readable .npz file: {err}") from err
    with archive:
        keys = set(archive.files)
        missing = {"x_train", "y_train"} - keys
        if missing:
            raise ValueError(
                f"{path} lacks {sorted(missing)}; expected keys x_train, y_train (and optionally x_test, "
                "y_test)"
            )
        if ("x_test" in keys) != ("y_test" in keys):
            raise ValueError(f"{path} has only one of x_test / y_test; give both or neither")
        train = _npz_pair(
            path, _npz_array(path, archive, "x_train"), _npz_array(path, archive, "y_train"), "train"
        )
        test = None
        if "x_test" in keys:
            test = _npz_pair(
                path, _npz_array(path, archive, "x_test"), _npz_array(path, archive, "y_test"), "test"
            )
    return train, test


def _npz_array(path: Path, archive, key: str) -> np.ndarray:
    """``archive[key]`` as an array of numbers, or an error naming the file and the key."""
    try:
        array = archive[key]
    except (
        OSError,
        ValueError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
    ) as err:  # object arrays, damaged members
        raise ValueError(
            f"{path}: {key} cannot be read ({err}); write numeric arrays with numpy.savez"
        ) from None
    if array.dtype.kind not in "uif":  # strings, booleans, complex numbers: not pixels or class numbers
        raise ValueError(f"{path}: {key} holds {array.dtype} values; it needs numbers (integers, or floats)")
    if array.ndim == 0:
        raise ValueError(f"{path}: {key} is a single number; it needs one entry per example")
    return array


def _npz_pair(path: Path, x: np.ndarray, y: np.ndarray, split: str) -> Pair:
    if len(x) != len(y):
        raise ValueError(f"{path}: x_{split} has {len(x)} examples but y_{split} has {len(y)}")
    if y.ndim > 2 or (
        y.ndim == 2 and y.shape[1] != 1
    ):  # one-hot rows would read as several labels per example
        raise ValueError(
            f"{path}: y_{split} has shape {y.shape}; expected one class number per example, (N,) or (N, 1)"
        )
    if x.ndim == 2 and x.shape[1] == 28 * 28:  # flattened images
        x = x.reshape(-1, 28, 28)
    if x.ndim == 4 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.ndim != 3:
        raise ValueError(
            f"{path}: x_{split} has shape {x.shape}; expected (N, 28, 28), (N, 28, 28, 1) or (N, 784)"
        )
    return _mnist_pixels(x, path), _mnist_labels(y.reshape(-1), path)


def _mnist_pixels(images: np.ndarray, source: Path) -> np.ndarray:
    """``(N, H, W)`` pixels as ``(N, H, W, 1)`` float32 in [0, 1].

    Integer pixels (and floats above 1) are taken as 0..255; floats already within
    [0, 1] are kept as they are.
    """
    if 0 in images.shape[1:]:  # the model's input layer would have no inputs
        raise ValueError(f"{source}: the images are {image_size(images)} pixels; each needs at least 1 x 1")
    x = images.astype(np.float32)
    if not np.isfinite(x).all():  # NaN passes every range check below, then a run "diverges" at t=0
        raise ValueError(f"{source}: pixel values are NaN or infinite")
    if np.issubdtype(images.dtype, np.integer) or (x.size and x.max() > 1.0):
        x /= 255.0
    if x.size and (x.min() < 0.0 or x.max() > 1.0):
        raise ValueError(f"{source}: pixel values outside 0..255")
    return x[..., np.newaxis]


def _mnist_labels(labels: np.ndarray, source: Path) -> np.ndarray:
    if labels.size and (
        labels.min() < 0 or labels.max() >= MNIST_CLASSES or np.any(labels != np.round(labels))
    ):
        raise ValueError(f"{source}: labels must be integers 0..{MNIST_CLASSES - 1}")
    return labels.astype(np.int32)
