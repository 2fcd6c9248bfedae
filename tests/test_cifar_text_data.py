"""CIFAR folders, text files and the synthetic images and token streams: read, checked, split, seeded.

The CIFAR files are written here in the official format, as the Python 2 pickler that made
the downloads wrote them (protocol 2, strings as bytes, numpy's array reconstruction), a few
dozen images each; the loader must read them back pixel for pixel and refuse anything else.
"""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fred.numerics import cifar, tokens
from fred.numerics.data import load_dataset, shard
from fred.scenario.loading import ScenarioError, validate
from fred.scenario.schema import DataConfig
from tests.conftest import tiny


# ----------------------------------------------------------------------------- the official format
def _py2(obj) -> bytes:
    """Opcodes of Python 2's ``cPickle.dump(obj, f, 2)`` for the objects a CIFAR batch holds."""
    if isinstance(obj, dict):
        return b"}(" + b"".join(_py2(k) + _py2(v) for k, v in obj.items()) + b"u"
    if isinstance(obj, list):
        return b"](" + b"".join(map(_py2, obj)) + b"e"
    if isinstance(obj, bytes):  # a Python 2 str
        return (b"U" + bytes([len(obj)]) if len(obj) < 256 else b"T" + struct.pack("<I", len(obj))) + obj
    if isinstance(obj, bool):
        return b"\x88" if obj else b"\x89"
    if isinstance(obj, int):
        return b"K" + bytes([obj]) if 0 <= obj < 256 else b"J" + struct.pack("<i", obj)
    if obj is None:
        return b"N"
    if isinstance(obj, tuple):
        return b"(" + b"".join(map(_py2, obj)) + b"t"
    if isinstance(obj, np.ndarray):  # numpy 1's ndarray.__reduce__, as the files have it
        dtype = (
            b"cnumpy\ndtype\n"
            + _py2((b"u1", 0, 1))
            + b"R"
            + _py2((3, b"|", None, None, None, -1, -1, 0))
            + b"b"
        )
        state = b"(" + _py2(1) + _py2(tuple(obj.shape)) + dtype + _py2(False) + _py2(obj.tobytes()) + b"t"
        return (
            b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
            + _py2((0,))
            + _py2(b"b")
            + b"\x87R"
            + state
            + b"b"
        )
    raise TypeError(type(obj))


def write_batch(path: Path, batch: dict) -> None:
    path.write_bytes(b"\x80\x02" + _py2(batch) + b".")


def images(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.integers(0, 256, (count, 3072), dtype=np.uint8)


def cifar10_folder(root: Path, per_batch: int = 6, test: int | None = 8, seed: int = 0) -> tuple[Path, dict]:
    """A cifar-10-batches-py folder of 5 x ``per_batch`` training images and ``test`` test images."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    names = [f"data_batch_{i}" for i in range(1, 6)] + (["test_batch"] if test is not None else [])
    for name in names:
        count = per_batch if name != "test_batch" else test
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, count)],
            b"data": images(rng, count),
            b"filenames": [f"img_{i}.png".encode() for i in range(count)],
        }
        write_batch(folder / name, batch)
        written[name] = batch
    return folder, written


def cifar100_folder(root: Path, train: int = 20, test: int = 6) -> tuple[Path, dict]:
    rng = np.random.default_rng(1)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    written = {}
    for name, count in [("train", train), ("test", test)]:
        fine = [int(v) for v in rng.integers(0, 100, count)]
        batch = {
            b"filenames": [b"x.png"] * count,
            b"batch_label": name.encode(),
            b"fine_labels": fine,
            b"coarse_labels": [f // 5 for f in fine],
            b"data": images(rng, count),
        }
        write_batch(folder / name, batch)
        written[name] = batch
    return folder, written


def load(source: dict, **data) -> object:
    return load_dataset(DataConfig(source=source, **data), np.random.default_rng(0))


def as_images(data: np.ndarray) -> np.ndarray:
    """The documented layout: 1,024 red, then green, then blue values, each 32 x 32 in row order."""
    return (
        np.stack([data[:, c * 1024 : (c + 1) * 1024].reshape(-1, 32, 32) for c in range(3)], axis=-1) / 255.0
    )


# ----------------------------------------------------------------------------- CIFAR
def test_a_cifar10_folder_in_the_official_format_reads_back_pixel_for_pixel(tmp_path):
    folder, written = cifar10_folder(tmp_path)
    dataset = load({"kind": "cifar10", "path": str(folder)})
    train = np.concatenate([written[f"data_batch_{i}"][b"data"] for i in range(1, 6)])
    labels = sum((written[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    assert dataset.x_train.shape == (30, 32, 32, 3) and dataset.x_train.dtype == np.float32
    np.testing.assert_allclose(dataset.x_train, as_images(train), rtol=1e-6)
    assert dataset.y_train.tolist() == labels and dataset.y_train.dtype == np.int32
    # the official test batch is the eval set, in its order
    np.testing.assert_allclose(dataset.x_eval, as_images(written["test_batch"][b"data"]), rtol=1e-6)
    assert dataset.y_eval.tolist() == written["test_batch"][b"labels"]
    assert (dataset.task, dataset.num_classes) == ("classification", 10)
    assert 0.0 <= dataset.x_train.min() and dataset.x_train.max() <= 1.0


def test_the_folder_holding_the_official_one_will_do_and_eval_examples_caps_the_test_split(tmp_path):
    cifar10_folder(tmp_path)
    dataset = load({"kind": "cifar10", "path": str(tmp_path)}, eval_examples=3)
    assert len(dataset.x_train) == 30 and len(dataset.x_eval) == 3


def test_without_a_test_batch_eval_fraction_of_the_training_images_is_held_out(tmp_path):
    folder, _ = cifar10_folder(tmp_path, per_batch=8, test=None)
    dataset = load({"kind": "cifar10", "path": str(folder)}, eval_fraction=0.25)
    assert (len(dataset.x_train), len(dataset.x_eval)) == (30, 10)


@pytest.mark.parametrize("labels, classes", [("fine", 100), ("coarse", 20)])
def test_cifar100_reads_fine_labels_by_default_and_coarse_ones_when_asked(tmp_path, labels, classes):
    folder, written = cifar100_folder(tmp_path)
    source = {"kind": "cifar100", "path": str(folder)} | ({"labels": labels} if labels == "coarse" else {})
    dataset = load(source)
    assert dataset.num_classes == classes and len(dataset.x_train) == 20 and len(dataset.x_eval) == 6
    assert dataset.y_train.tolist() == written["train"][f"{labels}_labels".encode()]
    np.testing.assert_allclose(dataset.x_eval, as_images(written["test"][b"data"]), rtol=1e-6)


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_batches_pickled_by_python_3_read_too(tmp_path, protocol):
    # numpy 2 names numpy._core, and protocol 2 writes bytes through _codecs.encode
    folder, written = cifar10_folder(tmp_path)
    again = {key.decode(): value for key, value in written["data_batch_1"].items()}
    (folder / "data_batch_1").write_bytes(pickle.dumps(again, protocol=protocol))
    dataset = load({"kind": "cifar10", "path": str(folder)})
    np.testing.assert_allclose(dataset.x_train[:6], as_images(written["data_batch_1"][b"data"]), rtol=1e-6)


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_pickle_that_names_any_other_function_is_refused_unread_naming_the_file(tmp_path):
    folder, _ = cifar10_folder(tmp_path)
    marker = tmp_path / "touched"
    (folder / "data_batch_3").write_bytes(pickle.dumps({"data": _Evil(marker)}, protocol=2))
    with pytest.raises(
        ValueError, match=r"data_batch_3: not read as a CIFAR batch: it names posix.mkdir, .*refused unread"
    ):
        load({"kind": "cifar10", "path": str(folder)})
    assert not marker.exists()
    (folder / "data_batch_3").write_bytes(b"\x80\x02cos\nsystem\n(U\x04truetR.")
    with pytest.raises(ValueError, match="it names os.system"):
        load({"kind": "cifar10", "path": str(folder)})


def test_object_arrays_in_a_batch_are_refused(tmp_path):
    folder, _ = cifar10_folder(tmp_path)
    (folder / "data_batch_2").write_bytes(
        pickle.dumps({"data": np.array([1, "a"], dtype=object)}, protocol=2)
    )
    with pytest.raises(ValueError, match="data_batch_2: .*an array of Python objects"):
        load({"kind": "cifar10", "path": str(folder)})


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda f: (f / "data_batch_4").unlink(), "lacks data_batch_4"),
        (
            lambda f: (f / "data_batch_1").write_text("not a pickle at all"),
            "data_batch_1 is not a CIFAR batch",
        ),
        (lambda f: (f / "data_batch_1").write_bytes(b"\x80\x02"), "data_batch_1 is not a CIFAR batch"),
        (lambda f: write_batch(f / "data_batch_5", [1, 2]), "data_batch_5 holds a list, not the dict"),
        (
            lambda f: write_batch(f / "data_batch_5", {b"data": images(np.random.default_rng(0), 2)}),
            "no 'labels' entry",
        ),
        (
            lambda f: write_batch(
                f / "data_batch_2", {b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 12]}
            ),
            r"data_batch_2: 'labels' holds labels outside 0..9",
        ),
        (
            lambda f: write_batch(
                f / "data_batch_2", {b"data": np.zeros((2, 3071), np.uint8), b"labels": [1, 2]}
            ),
            r"'data' is uint8 \(2, 3071\)",
        ),
        (
            lambda f: write_batch(f / "test_batch", {b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}),
            r"test_batch: 'labels' is int64 \(1,\); it needs 2 integers",
        ),
    ],
)
def test_a_damaged_folder_is_refused_naming_the_file(tmp_path, damage, words):
    folder, _ = cifar10_folder(tmp_path)
    damage(folder)
    with pytest.raises((ValueError, FileNotFoundError), match=words):
        load({"kind": "cifar10", "path": str(folder)})


def test_a_missing_folder_says_where_to_get_the_data(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"CIFAR-10 folder .*nowhere does not exist; download the python version \(https",
    ):
        load({"kind": "cifar10", "path": str(tmp_path / "nowhere")})


def test_a_cifar_run_reads_its_folder_through_the_whole_stack(tmp_path):
    import fred

    folder, _ = cifar10_folder(tmp_path, per_batch=8)
    data = tiny(
        data={"source": {"kind": "cifar10", "path": str(folder)}, "batch_size": 8},
        stop={"max_updates": 2},
        cluster={"workers": 2},
    )
    data["model"] = {"kind": "cnn", "channels": [4], "hidden": 8}
    result = fred.run(data)
    assert result.summary["status"] == "completed" and result.params["conv0_w"].shape == (3, 3, 3, 4)


# ----------------------------------------------------------------------------- text
def test_a_text_file_by_byte_is_cut_into_windows_and_their_next_tokens_with_the_tail_held_out(tmp_path):
    text = bytes(range(40)) * 5  # 200 bytes
    (tmp_path / "corpus.txt").write_bytes(text)
    dataset = load({"kind": "text", "path": str(tmp_path / "corpus.txt"), "context": 8}, eval_fraction=0.2)
    assert (dataset.num_classes, dataset.task) == (256, "classification")
    corpus = np.frombuffer(text, np.uint8)
    assert dataset.x_train.shape == (19, 8) == dataset.y_train.shape and dataset.x_train.dtype == np.int32
    for i in range(19):  # stride = context: window i starts at token 8 i
        assert dataset.x_train[i].tolist() == corpus[8 * i : 8 * i + 8].tolist()
        assert dataset.y_train[i].tolist() == corpus[8 * i + 1 : 8 * i + 9].tolist()
    tail = corpus[160:]  # the last 20 %, windows of its own
    assert dataset.x_eval.shape == (4, 8) and dataset.x_eval[0].tolist() == tail[:8].tolist()
    assert dataset.y_eval[-1].tolist() == tail[25:33].tolist()


def test_a_text_file_by_character_numbers_its_characters_in_code_point_order(tmp_path):
    text = "héllo wörld, " * 12
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    dataset = load({"kind": "text", "path": str(tmp_path / "t.txt"), "level": "char", "context": 5})
    alphabet = sorted(set(text))
    assert dataset.num_classes == len(alphabet) == 10
    decoded = "".join(alphabet[t] for t in dataset.x_train[0])
    assert decoded == text[:5] and "".join(alphabet[t] for t in dataset.y_train[0]) == text[1:6]


@pytest.mark.parametrize(
    "content, source, words",
    [
        (b"caf\xe9 " * 40, {"level": "char"}, r"t.txt is not UTF-8 text \(byte 3.*level: byte"),
        (b"abc", {}, r"t.txt: 3 tokens split .* each part needs at least context \+ 1 = 65"),
        (
            b"aaaaaaaaaaaaaaaaaaaa",
            {"level": "char", "context": 2},
            "uses 1 distinct character; next-token prediction needs at least 2",
        ),
    ],
)
def test_a_text_file_that_cannot_be_read_as_asked_is_refused_naming_the_file_and_the_fix(
    tmp_path, content, source, words
):
    (tmp_path / "t.txt").write_bytes(content)
    with pytest.raises(ValueError, match=words):
        load({"kind": "text", "path": str(tmp_path / "t.txt"), **source})
    with pytest.raises(FileNotFoundError, match=r"text file .*missing.txt does not exist"):
        load({"kind": "text", "path": str(tmp_path / "missing.txt")})


def test_sequence_labels_are_dealt_out_iid_only():
    data = tiny(data={"source": {"kind": "synthetic_tokens"}, "sharding": "by_label"})
    data["model"] = {"kind": "transformer"}
    with pytest.raises(
        ScenarioError,
        match="data.sharding by_label deals examples out by their class.*use data.sharding: iid",
    ):
        validate(data)
    y = np.zeros((20, 4), np.int32)
    with pytest.raises(ValueError, match="these labels are sequences .* use sharding 'iid'"):
        shard(y, 2, DataConfig(sharding="dirichlet"), np.random.default_rng(0))


# ----------------------------------------------------------------------------- synthetic
@pytest.mark.parametrize(
    "source", [{"kind": "synthetic_images", "examples": 60}, {"kind": "synthetic_tokens", "examples": 60}]
)
def test_synthetic_data_is_the_seeds_alone(source):
    first, again = (load_dataset(DataConfig(source=source), np.random.default_rng(3)) for _ in range(2))
    other = load_dataset(DataConfig(source=source), np.random.default_rng(4))
    for name in ("x_train", "y_train", "x_eval", "y_eval"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.x_train, other.x_train)


def test_synthetic_images_are_cifar_shaped_and_learnable():
    dataset = load({"kind": "synthetic_images", "examples": 1000, "classes": 10})
    assert dataset.x_train.shape[1:] == (32, 32, 3) and dataset.x_train.dtype == np.float32
    assert 0.0 <= dataset.x_train.min() and dataset.x_train.max() <= 1.0
    assert np.bincount(dataset.y_train, minlength=10).min() > 60  # balanced
    # the nearest class mean (a linear rule, no training) already beats chance four times over
    means = np.stack([dataset.x_train[dataset.y_train == c].mean(axis=0) for c in range(10)])
    distance = ((dataset.x_eval[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert (distance.argmin(axis=1) == dataset.y_eval).mean() > 0.4


def test_synthetic_tokens_follow_a_sparse_chain_whose_next_token_is_far_from_a_guess():
    source = {"kind": "synthetic_tokens", "examples": 400, "vocab": 32, "context": 16, "branching": 3}
    dataset = load(source)
    assert dataset.x_train.shape == (320, 16) == dataset.y_train.shape and dataset.num_classes == 32
    assert np.array_equal(dataset.x_train[:, 1:], dataset.y_train[:, :-1])  # y is x moved on by one token
    pairs = np.stack([dataset.x_train.ravel(), dataset.y_train.ravel()], axis=1)
    successors = {a: set(pairs[pairs[:, 0] == a, 1].tolist()) for a in range(32)}
    assert max(len(s) for s in successors.values()) <= 3
    counts = np.zeros((32, 32))
    np.add.at(counts, (pairs[:, 0], pairs[:, 1]), 1)
    p = counts / counts.sum(axis=1, keepdims=True).clip(1)
    entropy = -(counts * np.log(np.where(p > 0, p, 1))).sum() / counts.sum()
    assert entropy < 0.5 * np.log(32)


def test_text_windows_do_not_overlap():
    x, y = tokens.windows(np.arange(23, dtype=np.int32), 5)
    assert x.tolist() == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]
    assert y[-1].tolist() == [16, 17, 18, 19, 20]


def test_the_allowed_globals_are_numpy_array_parts_and_latin1_bytes_only():
    assert set(cifar.ALLOWED) == {
        (f"numpy.{core}.{module}", name)
        for core in ("core", "_core")
        for module, name in [("multiarray", "_reconstruct"), ("numeric", "_frombuffer")]
    } | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}
