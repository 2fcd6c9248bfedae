"""Tests for fred.numerics.data: loading, splitting, sharding and batch streams."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fred.numerics.data import BatchStream, Dataset, GlobalBatchStream, load_dataset, shard
from fred.scenario.schema import DataConfig, MNISTData, SyntheticData


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset(DataConfig(), rng(0))


# ----------------------------------------------------------------------------- digits
def test_digits_are_8x8_single_channel_float_images_in_unit_range(digits: Dataset) -> None:
    assert digits.x_train.dtype == np.float32 and digits.x_eval.dtype == np.float32
    assert digits.x_train.shape[1:] == (8, 8, 1)
    assert digits.feature_shape == (8, 8, 1)
    assert digits.x_train.min() >= 0.0 and digits.x_train.max() <= 1.0
    assert digits.x_train.max() == 1.0  # scaled by 16, not by 255
    assert digits.y_train.dtype == np.int32
    assert set(np.unique(digits.y_train)) == set(range(10))
    assert digits.task == "classification" and digits.num_classes == 10


def test_digits_hold_out_the_eval_fraction(digits: Dataset) -> None:
    total = len(digits.x_train) + len(digits.x_eval)
    assert total == 1797
    assert len(digits.x_eval) == round(0.2 * 1797)
    assert len(digits.y_train) == len(digits.x_train) and len(digits.y_eval) == len(digits.x_eval)


def test_eval_examples_keeps_only_the_first_held_out_examples(digits: Dataset) -> None:
    capped = load_dataset(DataConfig(eval_examples=50), rng(0))
    assert len(capped.x_eval) == 50
    np.testing.assert_array_equal(capped.x_eval, digits.x_eval[:50])
    np.testing.assert_array_equal(capped.x_train, digits.x_train)


def test_the_same_seed_gives_identical_arrays_and_another_seed_another_split(digits: Dataset) -> None:
    again = load_dataset(DataConfig(), rng(0))
    for name in ("x_train", "y_train", "x_eval", "y_eval"):
        np.testing.assert_array_equal(getattr(again, name), getattr(digits, name))
    other = load_dataset(DataConfig(), rng(1))
    assert not np.array_equal(other.y_eval, digits.y_eval)


def test_a_loaded_data_set_cannot_be_altered_by_accident(digits: Dataset) -> None:
    with pytest.raises(ValueError):
        digits.x_train[0, 0, 0, 0] = 5.0


# ----------------------------------------------------------------------------- synthetic
def test_synthetic_classification_has_the_requested_shape_and_labels_in_range() -> None:
    cfg = DataConfig(source=SyntheticData(examples=500, features=7, classes=3, noise=0.3), eval_fraction=0.1)
    data = load_dataset(cfg, rng(3))
    assert data.task == "classification" and data.num_classes == 3
    assert data.feature_shape == (7,)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int32
    assert len(data.x_train) == 450 and len(data.x_eval) == 50
    labels = np.concatenate([data.y_train, data.y_eval])
    assert set(np.unique(labels)) == {0, 1, 2}


def test_synthetic_clusters_sit_around_distinct_class_means() -> None:
    cfg = DataConfig(source=SyntheticData(examples=2000, features=20, classes=4, noise=0.1))
    data = load_dataset(cfg, rng(0))
    means = np.stack([data.x_train[data.y_train == c].mean(axis=0) for c in range(4)])
    spread = np.linalg.norm(data.x_train - means[data.y_train], axis=1).mean()
    nearest = min(np.linalg.norm(means[i] - means[j]) for i in range(4) for j in range(i))
    assert nearest > 10 * spread


def test_synthetic_regression_has_float_targets_that_follow_a_linear_model() -> None:
    cfg = DataConfig(source=SyntheticData(task="regression", examples=400, features=5, noise=0.0))
    data = load_dataset(cfg, rng(4))
    assert data.task == "regression" and data.num_classes == 0
    assert data.feature_shape == (5,)
    assert data.y_train.dtype == np.float32 and data.y_train.shape == (len(data.x_train),)
    w, *_ = np.linalg.lstsq(data.x_train, data.y_train, rcond=None)
    np.testing.assert_allclose(data.x_eval @ w, data.y_eval, atol=1e-4)


def test_synthetic_data_is_deterministic_per_seed() -> None:
    cfg = DataConfig(source=SyntheticData(examples=100))
    a, b, c = load_dataset(cfg, rng(9)), load_dataset(cfg, rng(9)), load_dataset(cfg, rng(10))
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_eval, b.y_eval)
    assert not np.array_equal(a.x_train, c.x_train)


def test_the_smallest_split_keeps_one_example_on_each_side() -> None:
    cfg = DataConfig(source=SyntheticData(examples=2), eval_fraction=0.01)
    data = load_dataset(cfg, rng(0))
    assert len(data.x_train) == 1 and len(data.x_eval) == 1


# ----------------------------------------------------------------------------- mnist
def idx_bytes(magic: int, array: np.ndarray) -> bytes:
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx(path: Path, magic: int, array: np.ndarray, gz: bool) -> None:
    data = idx_bytes(magic, array)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)


def tiny_mnist(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    g = rng(seed)
    return g.integers(0, 256, (n, 28, 28), dtype=np.uint8), g.integers(0, 10, n, dtype=np.uint8)


def write_mnist_dir(directory: Path, gz: bool, with_test: bool = True) -> None:
    images, labels = tiny_mnist(1, 20)
    write_idx(directory / "train-images-idx3-ubyte", 0x803, images, gz)
    write_idx(directory / "train-labels-idx1-ubyte", 0x801, labels, gz)
    if with_test:
        images, labels = tiny_mnist(2, 5)
        write_idx(directory / "t10k-images-idx3-ubyte", 0x803, images, gz)
        write_idx(directory / "t10k-labels-idx1-ubyte", 0x801, labels, gz)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_mnist_idx_files_load_with_the_t10k_pair_as_eval(tmp_path: Path, gz: bool) -> None:
    write_mnist_dir(tmp_path, gz)
    data = load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))
    images, labels = tiny_mnist(1, 20)
    test_images, test_labels = tiny_mnist(2, 5)
    assert data.feature_shape == (28, 28, 1) and data.x_train.dtype == np.float32
    np.testing.assert_allclose(data.x_train[..., 0], images / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(data.y_train, labels)
    np.testing.assert_array_equal(data.y_eval, test_labels)
    np.testing.assert_allclose(data.x_eval[..., 0], test_images / 255.0, rtol=1e-6)
    assert data.y_train.dtype == np.int32 and data.num_classes == 10


def test_mnist_without_a_test_pair_is_split_by_eval_fraction(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False, with_test=False)
    data = load_dataset(DataConfig(source=MNISTData(path=str(tmp_path)), eval_fraction=0.25), rng(0))
    assert len(data.x_train) == 15 and len(data.x_eval) == 5


def test_mnist_eval_examples_caps_the_test_split(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=True)
    data = load_dataset(DataConfig(source=MNISTData(path=str(tmp_path)), eval_examples=3), rng(0))
    np.testing.assert_array_equal(data.y_eval, tiny_mnist(2, 5)[1][:3])


def test_mnist_npz_loads_with_and_without_a_test_split(tmp_path: Path) -> None:
    images, labels = tiny_mnist(1, 20)
    test_images, test_labels = tiny_mnist(2, 5)
    with_test = tmp_path / "with.npz"
    np.savez(with_test, x_train=images, y_train=labels, x_test=test_images, y_test=test_labels)
    data = load_dataset(DataConfig(source=MNISTData(path=str(with_test))), rng(0))
    assert data.x_train.shape == (20, 28, 28, 1) and data.x_eval.shape == (5, 28, 28, 1)
    np.testing.assert_array_equal(data.y_eval, test_labels)
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0

    train_only = tmp_path / "train.npz"
    np.savez(train_only, x_train=images, y_train=labels)
    data = load_dataset(DataConfig(source=MNISTData(path=str(train_only))), rng(0))
    assert len(data.x_train) == 16 and len(data.x_eval) == 4


def test_a_missing_mnist_file_is_named_in_the_error(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="train-labels-idx1-ubyte"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


def test_a_missing_mnist_path_is_named_in_the_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(
        FileNotFoundError, match=f"^data.source.path: {missing} does not exist; expected a directory"
    ):
        load_dataset(DataConfig(source=MNISTData(path=str(missing))), rng(0))


def test_a_lone_t10k_file_is_reported(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False)
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_bad_magic_number_names_the_file_and_the_expected_magic(tmp_path: Path, gz: bool) -> None:
    write_mnist_dir(tmp_path, gz)
    images, _ = tiny_mnist(1, 20)
    write_idx(tmp_path / "train-images-idx3-ubyte", 0x801, images, gz)  # a labels magic on an images file
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.*0x00000803"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


def test_a_truncated_idx_file_reports_its_expected_size(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.*should be"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


def test_images_and_labels_of_different_counts_are_rejected(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", 0x801, np.zeros(19), gz=False)
    with pytest.raises(ValueError, match="20 images.*19 labels"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


def test_an_npz_without_training_arrays_is_rejected_by_name(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, images=np.zeros((3, 28, 28)))
    with pytest.raises(ValueError, match=r"bad\.npz.*x_train"):
        load_dataset(DataConfig(source=MNISTData(path=str(path))), rng(0))


def test_a_file_that_is_not_an_npz_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "notes.npz"
    path.write_text("not an archive")
    with pytest.raises(
        ValueError, match=r"notes\.npz is not a \.npz file \(not a zip archive\); write one with numpy\.savez"
    ):
        load_dataset(DataConfig(source=MNISTData(path=str(path))), rng(0))


def test_an_empty_mnist_test_split_is_refused_by_name(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", 0x803, np.zeros((0, 28, 28)), gz=False)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", 0x801, np.zeros(0), gz=False)
    with pytest.raises(ValueError, match="the test split has no examples"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


def test_nan_pixels_in_an_npz_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "nan.npz"
    np.savez(path, x_train=np.full((20, 28, 28), np.nan, np.float32), y_train=np.arange(20) % 10)
    with pytest.raises(ValueError, match=r"nan\.npz: pixel values are NaN or infinite"):
        load_dataset(DataConfig(source=MNISTData(path=str(path))), rng(0))


LABELS = np.arange(20) % 10
IMAGES = np.zeros((20, 28, 28), np.uint8)


@pytest.mark.parametrize(
    "arrays, message",
    [
        (
            {"x_train": np.zeros((20, 0, 0), np.uint8), "y_train": LABELS},
            "the images are 0 x 0 pixels; each needs at least 1 x 1",
        ),  # ZeroDivisionError
        ({"x_train": np.zeros((20, 28, 0), np.uint8), "y_train": LABELS}, "the images are 28 x 0 pixels"),
        (
            {"x_train": np.zeros((0, 28, 28), np.uint8), "y_train": LABELS[:0]},
            "the training split has 0 examples; give at least 2",
        ),
        (
            {"x_train": IMAGES, "y_train": np.zeros((20, 3))},
            "y_train has shape (20, 3); expected one class number per example",
        ),  # 60 labels for 20 images
        (
            {"x_train": IMAGES, "y_train": np.array(["a"] * 20)},
            "y_train holds <U1 values; it needs numbers",
        ),  # a numpy traceback
        (
            {"x_train": IMAGES, "y_train": np.ones(20, bool)},
            "y_train holds bool values",
        ),  # taken as classes 0 and 1
        (
            {"x_train": IMAGES, "y_train": np.ones(20, complex)},
            "y_train holds complex128 values",
        ),  # imaginary part dropped
        (
            {"x_train": IMAGES, "y_train": np.array([None] * 20, dtype=object)},
            "y_train cannot be read (Object arrays",
        ),
        (
            {"x_train": np.float32(3), "y_train": np.float32(1)},
            "x_train is a single number",
        ),  # TypeError: len() of unsized object
        (
            {"x_train": IMAGES, "y_train": LABELS, "x_test": np.zeros((5, 14, 14)), "y_test": LABELS[:5]},
            "the training images are 28 x 28 pixels but the test images 14 x 14",
        ),
    ],
    ids=[
        "no-pixels",
        "no-columns",
        "no-examples",
        "one-hot",
        "strings",
        "booleans",
        "complex",
        "objects",
        "scalar",
        "two-sizes",
    ],
)
def test_degenerate_npz_data_is_refused_naming_the_file(tmp_path: Path, arrays: dict, message: str) -> None:
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError) as refused:
        load_dataset(DataConfig(source=MNISTData(path=str(path))), rng(0))
    assert str(refused.value).startswith(f"data.source.path: {path}: ") and message in str(refused.value)


def test_idx_images_of_no_pixels_are_refused_naming_the_file(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=False)
    write_idx(tmp_path / "train-images-idx3-ubyte", 0x803, np.zeros((20, 0, 28)), gz=False)
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte: the images are 0 x 28 pixels"):
        load_dataset(DataConfig(source=MNISTData(path=str(tmp_path))), rng(0))


# ----------------------------------------------------------------------------- sharding
def check_partition(parts: list[np.ndarray], n: int, workers: int) -> None:
    assert len(parts) == workers
    for p in parts:
        assert p.dtype == np.int64 and len(p) > 0
        assert np.all(np.diff(p) > 0)  # sorted, no repeats
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


@pytest.mark.parametrize("sharding", ["iid", "by_label", "dirichlet"])
def test_shards_are_disjoint_cover_every_example_and_are_deterministic(
    digits: Dataset, sharding: str
) -> None:
    cfg = DataConfig(sharding=sharding)
    parts = shard(digits.y_train, 6, cfg, rng(5))
    check_partition(parts, len(digits.y_train), 6)
    again = shard(digits.y_train, 6, cfg, rng(5))
    for a, b in zip(parts, again):
        np.testing.assert_array_equal(a, b)


def test_iid_shards_are_near_equal(digits: Dataset) -> None:
    sizes = [len(p) for p in shard(digits.y_train, 7, DataConfig(), rng(0))]
    assert max(sizes) - min(sizes) <= 1


def test_by_label_gives_each_worker_only_a_few_labels(digits: Dataset) -> None:
    parts = shard(digits.y_train, 10, DataConfig(sharding="by_label"), rng(0))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    labels = [np.unique(digits.y_train[p]) for p in parts]
    for worker, own in enumerate(labels):
        assert len(own) <= 3  # blocks are about one class wide
        np.testing.assert_array_equal(own, np.arange(own[0], own[-1] + 1))  # a contiguous run of labels
        if worker:
            assert labels[worker - 1][-1] <= own[0]  # in label order, sharing at most a boundary class
    assert sum(len(own) for own in labels) <= 10 + 10 - 1  # each cut splits at most one class


def label_skew(y: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean share of each worker's most common label: 1/classes when uniform, 1 when single-label."""
    return float(np.mean([np.bincount(y[p]).max() / len(p) for p in parts]))


def test_dirichlet_with_small_alpha_is_skewed_and_large_alpha_is_near_uniform(digits: Dataset) -> None:
    skewed = shard(digits.y_train, 8, DataConfig(sharding="dirichlet", dirichlet_alpha=0.05), rng(0))
    uniform = shard(digits.y_train, 8, DataConfig(sharding="dirichlet", dirichlet_alpha=1000.0), rng(0))
    assert label_skew(digits.y_train, skewed) > 0.5
    assert label_skew(digits.y_train, uniform) < 0.2


@settings(max_examples=40, deadline=None)
@given(
    workers=st.integers(1, 16),
    alpha=st.floats(0.001, 100.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_shards_partition_the_data_and_leave_no_worker_empty(
    workers: int, alpha: float, seed: int
) -> None:
    y = np.repeat(np.arange(5, dtype=np.int32), 12)  # 60 examples, 5 classes
    parts = shard(y, workers, DataConfig(sharding="dirichlet", dirichlet_alpha=alpha), rng(seed))
    check_partition(parts, len(y), workers)


@pytest.mark.parametrize("sharding", ["by_label", "dirichlet"])
def test_label_sharding_of_a_regression_task_is_refused(sharding: str) -> None:
    y = np.linspace(-1, 1, 50, dtype=np.float32)
    with pytest.raises(ValueError, match=f"sharding '{sharding}' needs a classification data set"):
        shard(y, 4, DataConfig(sharding=sharding), rng(0))


def test_more_workers_than_examples_is_refused() -> None:
    with pytest.raises(ValueError, match="3 training examples over 4 workers"):
        shard(np.arange(3, dtype=np.int32), 4, DataConfig(), rng(0))


# ----------------------------------------------------------------------------- batch streams
def test_each_epoch_visits_every_index_once_and_drops_the_partial_batch() -> None:
    indices = np.arange(100, 123)  # 23 indices, batches of 5: 4 per epoch, 3 left over
    stream = BatchStream(indices, 5, rng(0))
    for epoch in range(3):
        assert stream.epoch == epoch
        batches = [stream.next() for _ in range(4)]
        assert all(len(b) == 5 and b.dtype == np.int64 for b in batches)
        seen = np.concatenate(batches)
        assert len(np.unique(seen)) == 20 and set(seen) <= set(indices)
    assert stream.epoch == 3


def test_each_epoch_draws_a_fresh_permutation() -> None:
    stream = BatchStream(np.arange(50), 50, rng(0))
    first, second = stream.next(), stream.next()
    np.testing.assert_array_equal(np.sort(first), np.sort(second))
    assert not np.array_equal(first, second)


def test_a_shard_smaller_than_one_batch_is_refused_naming_both_sizes() -> None:
    with pytest.raises(ValueError, match=r"3 examples.*batch of 8"):
        BatchStream(np.arange(3), 8, rng(0))


@settings(max_examples=30, deadline=None)
@given(
    workers=st.sampled_from([1, 2, 4, 8]),
    batch=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
)
def test_workers_blocks_concatenate_to_the_single_worker_big_batch_sequence(
    workers: int, batch: int, seed: int
) -> None:
    n_train = 300  # several epochs with a dropped remainder for most (workers, batch)
    reference = BatchStream(np.arange(n_train), workers * batch, rng(seed))
    stream = GlobalBatchStream(n_train, workers, batch, rng(seed))
    for _ in range(2 * n_train // (workers * batch) + 1):
        blocks = [stream.next_for(w) for w in range(workers)]
        assert all(len(b) == batch for b in blocks)
        np.testing.assert_array_equal(np.concatenate(blocks), reference.next())
    assert stream.buffered_batches == 0


def test_a_worker_far_ahead_sees_the_same_blocks_and_memory_is_released() -> None:
    workers, batch, steps = 4, 8, 500
    reference = BatchStream(np.arange(200), workers * batch, rng(7))
    expected = [reference.next() for _ in range(steps)]
    stream = GlobalBatchStream(200, workers, batch, rng(7))

    ahead = [stream.next_for(2) for _ in range(steps)]  # worker 2 races ahead alone
    assert stream.buffered_batches == steps
    for k, block in enumerate(ahead):
        np.testing.assert_array_equal(block, expected[k][2 * batch : 3 * batch])

    for k in range(steps):  # the others catch up in lock step
        for w in (0, 1, 3):
            np.testing.assert_array_equal(stream.next_for(w), expected[k][w * batch : (w + 1) * batch])
        assert stream.buffered_batches == steps - k - 1
    assert stream.buffered_batches == 0


def test_an_unknown_worker_is_refused() -> None:
    stream = GlobalBatchStream(100, 2, 4, rng(0))
    with pytest.raises(ValueError, match="worker 2 does not exist"):
        stream.next_for(2)


@pytest.mark.parametrize(
    ("data", "workers", "message"),
    [
        (
            {"batch_size": 1000},
            4,
            r"data.batch_size: 1000 rows a batch do not fit \d+ training examples \(iid sharding.*"
            r"set data.batch_size to at most \d+ \(whole tiles of strategy.exact_tile 8\), or use "
            r"fewer than 4 workers$",
        ),
        # fewer workers cannot fit a batch larger than the whole training set: not offered
        (
            {"batch_size": 5000},
            4,
            r"set data.batch_size to at most 352 \(whole tiles of strategy.exact_tile 8\)$",
        ),
        (
            {"batch_size": 5000, "exact_tile": 1},
            4,
            r"set data.batch_size to at most 359$",
        ),  # per-example leaves: any batch
        (
            {"batch_size": 1504},
            1,
            r"do not fit 1438 training examples .*: set data.batch_size to at most 1432 \(whole "
            r"tiles of strategy.exact_tile 8\)$",
        ),
        (
            {"batch_size": 400, "sharding": "dirichlet", "dirichlet_alpha": 0.5},
            4,
            r"data.batch_size: 400 rows a batch do not fit worker \d+'s dirichlet shard of \d+ examples: set "
            r"data.batch_size to at most \d+ "
            r"\(whole tiles of strategy.exact_tile 8\), or use fewer",
        ),
        (
            {"batch_size": 32, "source": {"kind": "synthetic", "examples": 2}},
            2,
            r"do not fit 1 training examples .*: set data.batch_size to at most 1 with strategy.exact_tile: "
            r"1 and use fewer "
            r"than 2 workers$",
        ),
    ],
)
def test_a_batch_the_data_cannot_fill_is_refused_naming_the_field_and_what_fits(
    data: dict, workers: int, message: str
) -> None:
    from fred.runs.runner import build
    from fred.scenario.loading import validate
    from tests.conftest import tiny

    scenario = tiny(cluster={"workers": workers})
    data = dict(data)  # the parameters are shared between runs of the test: not changed here
    tile = data.pop("exact_tile", None)
    if tile is not None:
        scenario["strategy"] = {**scenario["strategy"], "exact_tile": tile}
    scenario["data"] = {**scenario["data"], **data}
    with pytest.raises(ValueError, match=message):
        build(validate(scenario))


def test_digits_are_scikit_learns_to_the_bit_read_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from fred.numerics.data import _load_digits

    x, y = _load_digits()
    digits = load_digits()
    assert x.tobytes() == (digits.images / 16.0).astype(np.float32)[..., np.newaxis].tobytes()
    assert y.tobytes() == digits.target.astype(np.int32).tobytes()
    code = (
        "import sys; from fred.numerics.data import _load_digits; _load_digits(); print('sklearn' in "
        "sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # its import took 0.7 s of a first run
