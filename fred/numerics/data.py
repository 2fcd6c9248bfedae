"""Data sets, train/eval splits, worker shards and batch streams.

Everything here is plain numpy and fully determined by the ``numpy.random.Generator``
passed in: there is no global random state, so a scenario seed reproduces the same
examples, the same split, the same shards and the same batch order.

Nothing is ever downloaded. The default data set (8x8 digits) ships with
scikit-learn; MNIST (:mod:`fred.numerics.mnist`), CIFAR (:mod:`fred.numerics.cifar`), text
(:mod:`fred.numerics.tokens`) and any data set as arrays (:mod:`fred.numerics.files`) are read
from files the user already has; synthetic images and token sequences are generated from the seed.
"""

from __future__ import annotations

import functools
import importlib.util
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from fred.numerics import cifar, mnist, tokens
from fred.numerics.mnist import MNIST_CLASSES
from fred.scenario.schema import (
    ArraysData,
    CIFAR10Data,
    CIFAR100Data,
    DataConfig,
    DigitsData,
    MNISTData,
    SyntheticData,
    SyntheticImagesData,
    SyntheticTokensData,
    TextData,
)

Task = Literal["classification", "regression"]


# ----------------------------------------------------------------------------- data set
@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/eval split of one data set.

    ``x_*`` are float32 with shape ``(N, *feature_shape)``; ``y_*`` are int32 class
    labels for classification or float32 targets of shape ``(N,)`` for regression. Token
    sequences (next-token prediction) are int32 ``x_*`` of shape ``(N, T)`` with int32
    labels ``y_*`` of the same shape, the next token at every position; ``num_classes``
    is then the vocabulary's size.
    The arrays are made read-only so a shared data set cannot be altered by accident.
    (``eq=False``: element-wise array equality has no single truth value.)
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray
    task: Task
    num_classes: int  # 0 for regression

    def __post_init__(self) -> None:
        if len(self.x_train) != len(self.y_train) or len(self.x_eval) != len(self.y_eval):
            raise ValueError(
                f"examples and labels differ in number: train {len(self.x_train)} vs {len(self.y_train)}, "
                f"eval {len(self.x_eval)} vs {len(self.y_eval)}"
            )
        if self.x_train.shape[1:] != self.x_eval.shape[1:]:
            raise ValueError(
                f"train and eval feature shapes differ: {self.x_train.shape[1:]} vs {self.x_eval.shape[1:]}"
            )
        for array in (self.x_train, self.y_train, self.x_eval, self.y_eval):
            array.setflags(write=False)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one example, e.g. ``(8, 8, 1)`` for digits or ``(features,)`` for synthetic."""
        return tuple(self.x_train.shape[1:])


def load_dataset(cfg: DataConfig, rng: np.random.Generator) -> Dataset:
    """Load ``cfg.source``, split it into train and eval, and cap eval at ``cfg.eval_examples``."""
    source = cfg.source
    if isinstance(source, DigitsData):
        dataset = _split(*_load_digits(), cfg.eval_fraction, rng, "classification", 10)
    elif isinstance(source, SyntheticData):
        x, y = _synthetic(source, rng)
        classes = source.classes if source.task == "classification" else 0
        dataset = _split(x, y, cfg.eval_fraction, rng, source.task, classes)
    elif isinstance(source, SyntheticImagesData):
        dataset = _split(
            *_synthetic_images(source, rng), cfg.eval_fraction, rng, "classification", source.classes
        )
    elif isinstance(source, SyntheticTokensData):
        x, y = tokens.synthetic_tokens(source, rng)
        dataset = _split(x, y, cfg.eval_fraction, rng, "classification", source.vocab)
    elif isinstance(source, MNISTData):
        try:
            dataset = _load_mnist(source, cfg.eval_fraction, rng)
        except (FileNotFoundError, ValueError) as err:  # named by its field, as the arrays source's are
            raise type(err)(f"data.source.path: {err}") from None
    elif isinstance(source, (CIFAR10Data, CIFAR100Data)):
        dataset = _load_cifar(source, cfg.eval_fraction, rng)
    elif isinstance(source, TextData):
        train, held, vocab = tokens.text_split(source, cfg.eval_fraction)
        dataset = Dataset(*train, *held, "classification", vocab)
    elif isinstance(source, ArraysData):
        dataset = _load_arrays(source, cfg.eval_fraction, rng)
    else:  # pragma: no cover - the scenario schema admits no other source
        raise ValueError(f"unknown data source {source!r}")
    return _cap_eval(dataset, cfg.eval_examples)


def data_stream(seed: int) -> np.random.Generator:
    """The Generator a run of ``seed`` loads its data with (``load_dataset``'s ``rng``): its
    synthetic examples, its chain of tokens, its held-out split."""
    from fred.numerics.rng import stream  # jax, which it imports, is not needed to read data

    return stream(seed, "data", "load")


def loss_floor(cfg: DataConfig, seed: int) -> float | None:
    """The least expected eval loss (cross-entropy, nats a token) that any model can reach on the
    data of a run of ``seed``, where the data says: ``synthetic_tokens``' chain
    (:func:`fred.numerics.tokens.markov_loss_floor`). None for data that does not tell it.

    The held-out sequences are drawn from the same chain as the others, independently, so the
    floor is the expected loss of the Bayes-optimal predictor on them as on any of them."""
    if isinstance(cfg.source, SyntheticTokensData):
        return tokens.markov_loss_floor(cfg.source, data_stream(seed))
    return None


def _split(
    x: np.ndarray, y: np.ndarray, eval_fraction: float, rng: np.random.Generator, task: Task, num_classes: int
) -> Dataset:
    """Hold out a seeded random ``eval_fraction`` of the examples (at least one on each side)."""
    n = len(x)
    if n < 2:
        raise ValueError(f"need at least 2 examples to split into train and eval, got {n}")
    n_eval = min(max(int(round(eval_fraction * n)), 1), n - 1)
    order = rng.permutation(n)
    held, kept = order[:n_eval], order[n_eval:]
    return Dataset(x[kept], y[kept], x[held], y[held], task, num_classes)


def _cap_eval(dataset: Dataset, eval_examples: int | None) -> Dataset:
    """Keep only the first ``eval_examples`` eval examples (evaluation cost is per example)."""
    if eval_examples is None or eval_examples >= len(dataset.x_eval):
        return dataset
    return Dataset(
        dataset.x_train,
        dataset.y_train,
        dataset.x_eval[:eval_examples],
        dataset.y_eval[:eval_examples],
        dataset.task,
        dataset.num_classes,
    )


def _load_arrays(cfg: ArraysData, eval_fraction: float, rng: np.random.Generator) -> Dataset:
    """The user's arrays, checked; ``eval_path``'s as the eval set, else a held-out part of ``path``'s."""
    from fred.numerics.files import read_arrays  # pyarrow (and datasets) load only for this source

    train, held, classes = read_arrays(cfg)
    if held is None:
        return _split(*train, eval_fraction, rng, cfg.task, classes)
    return Dataset(*train, *held, cfg.task, classes)


# ----------------------------------------------------------------------------- digits
@functools.cache  # parsing sklearn's CSV costs ~7 ms, a third of a short run's fixed cost
def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 8x8 scikit-learn digits as ``(N, 8, 8, 1)`` float32 in [0, 1], read-only (shared).

    Read from the CSV scikit-learn ships, as its ``load_digits`` reads it (each row 64 pixel
    values 0..16, then the label), without importing scikit-learn: that import took 0.7 s,
    a sixth of a first run."""
    table = np.loadtxt(_digits_csv(), delimiter=",")
    x = (table[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)[..., np.newaxis]
    y = table[:, -1].astype(np.int32)
    for array in (x, y):
        array.setflags(write=False)
    return x, y


def _digits_csv() -> Path:
    """scikit-learn's ``datasets/data/digits.csv.gz``, found without importing the package."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "data.source.kind: digits reads the digits scikit-learn ships, and scikit-learn is not "
            "installed; pip install scikit-learn, or give another data.source"
        )
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


# ----------------------------------------------------------------------------- synthetic
def _synthetic(cfg: SyntheticData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Generate the synthetic examples described by ``cfg``."""
    if cfg.task == "classification":
        return _gaussian_clusters(cfg, rng)
    return _linear_regression(cfg, rng)


def _gaussian_clusters(cfg: SyntheticData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``classes`` Gaussian clusters: random class means plus ``noise``-std per-example noise.

    Means are N(0, 1) per coordinate, so two means lie about ``sqrt(2 * features)``
    apart and the classes separate well while ``noise`` stays below about 1.
    Labels are balanced (every class present) and shuffled.
    """
    means = rng.standard_normal((cfg.classes, cfg.features))
    y = rng.permutation(np.arange(cfg.examples) % cfg.classes)
    x = means[y] + cfg.noise * rng.standard_normal((cfg.examples, cfg.features))
    return x.astype(np.float32), y.astype(np.int32)


def _linear_regression(cfg: SyntheticData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``y = x @ w + noise * eps`` with ``x, eps ~ N(0, 1)``.

    ``w ~ N(0, 1/features)`` keeps the signal variance near 1 whatever the width,
    so ``noise`` reads directly as a noise-to-signal ratio.
    """
    w = rng.standard_normal(cfg.features) / np.sqrt(cfg.features)
    x = rng.standard_normal((cfg.examples, cfg.features))
    y = x @ w + cfg.noise * rng.standard_normal(cfg.examples)
    return x.astype(np.float32), y.astype(np.float32)


IMAGE_SIDE, IMAGE_CHANNELS, TEMPLATE_SIDE = 32, 3, 8


def _synthetic_images(cfg: SyntheticImagesData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-shaped images ``(N, 32, 32, 3)`` in [0, 1] that a convolutional model can learn.

    Each class has a fixed template: 8 x 8 random colours, each a 4 x 4 block. An example is
    its class's template moved cyclically by up to ``shift`` pixels each way, plus Gaussian
    noise of standard deviation ``noise``, clipped to [0, 1]. Labels are balanced and shuffled.
    """
    scale = IMAGE_SIDE // TEMPLATE_SIDE
    coarse = rng.random((cfg.classes, TEMPLATE_SIDE, TEMPLATE_SIDE, IMAGE_CHANNELS), dtype=np.float32)
    templates = coarse.repeat(scale, axis=1).repeat(scale, axis=2)
    y = rng.permutation(np.arange(cfg.examples) % cfg.classes)
    moves = rng.integers(-cfg.shift, cfg.shift + 1, (cfg.examples, 2))
    side = np.arange(IMAGE_SIDE)
    rows = (side[None, :] - moves[:, :1]) % IMAGE_SIDE
    cols = (side[None, :] - moves[:, 1:]) % IMAGE_SIDE
    x = templates[y[:, None, None], rows[:, :, None], cols[:, None, :]]
    x += np.float32(cfg.noise) * rng.standard_normal(x.shape, dtype=np.float32)
    np.clip(x, 0.0, 1.0, out=x)
    return x, y.astype(np.int32)


# ----------------------------------------------------------------------------- cifar
def _load_cifar(cfg: CIFAR10Data | CIFAR100Data, eval_fraction: float, rng: np.random.Generator) -> Dataset:
    """CIFAR from its official folder; its test split is the eval set, else a held-out part of train."""
    train, test = cifar.read(cfg)
    n_classes = cifar.classes(cfg)
    if test is None:
        if len(train[0]) < 2:
            raise ValueError(
                f"{cifar.find_folder(cfg)}: {len(train[0])} training images and no test file; give at least 2"
            )
        return _split(*train, eval_fraction, rng, "classification", n_classes)
    if len(train[0]) == 0 or len(test[0]) == 0:
        split = "training files hold" if len(train[0]) == 0 else "test file holds"
        raise ValueError(f"{cifar.find_folder(cfg)}: the {split} no images; each split needs at least one")
    return Dataset(*train, *test, "classification", n_classes)


# ----------------------------------------------------------------------------- mnist
def _load_mnist(cfg: MNISTData, eval_fraction: float, rng: np.random.Generator) -> Dataset:
    """MNIST from an IDX directory or one ``.npz``; its own test split, if present, is the eval set."""
    path = Path(cfg.path).expanduser()
    train, test = mnist.read(path)
    if len(train[0]) < (2 if test is None else 1):  # a split needs one example on each side
        raise ValueError(
            f"{path}: the training split has {len(train[0])} examples; give at least "
            f"{'2 (one is held out for evaluation)' if test is None else 1}"
        )
    if test is None:
        return _split(*train, eval_fraction, rng, "classification", MNIST_CLASSES)
    if len(test[0]) == 0:  # evaluating on nothing would divide by zero
        raise ValueError(
            f"{path}: the test split has no examples; give at least one, or leave it out to hold out part of "
            "train"
        )
    if train[0].shape[1:] != test[0].shape[1:]:
        raise ValueError(
            f"{path}: the training images are {mnist.image_size(train[0])} pixels but the test images "
            f"{mnist.image_size(test[0])}; both splits need images of one size"
        )
    return Dataset(*train, *test, "classification", MNIST_CLASSES)


# ----------------------------------------------------------------------------- sharding
def shard(y: np.ndarray, workers: int, cfg: DataConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Partition the train indices ``0..len(y)-1`` among ``workers`` by ``cfg.sharding``.

    Returns one sorted int64 index array per worker; they are disjoint, cover every
    index and are all non-empty. ``iid`` is a seeded equal split (training with iid
    sharding draws from :class:`GlobalBatchStream` instead; this is for reporting).
    """
    n = len(y)
    if workers < 1:
        raise ValueError(f"need at least one worker, got {workers}")
    if n < workers:
        raise ValueError(
            f"cannot shard {n} training examples over {workers} workers: each needs at least one"
        )
    if cfg.sharding != "iid" and np.ndim(y) > 1:
        raise ValueError(
            f"sharding '{cfg.sharding}' deals examples out by their class, and these labels are sequences "
            "(a token at every position), not one class each — use sharding 'iid'"
        )
    if cfg.sharding != "iid" and not np.issubdtype(np.asarray(y).dtype, np.integer):
        raise ValueError(
            f"sharding '{cfg.sharding}' needs a classification data set (integer labels); "
            f"these targets are {np.asarray(y).dtype} — use sharding 'iid'"
        )
    if cfg.sharding == "iid":
        parts = np.array_split(rng.permutation(n), workers)
    elif cfg.sharding == "by_label":
        parts = np.array_split(np.argsort(y, kind="stable"), workers)
    else:
        parts = _dirichlet_parts(np.asarray(y), workers, cfg.dirichlet_alpha, rng)
    return [np.sort(p).astype(np.int64) for p in parts]


def _dirichlet_parts(y: np.ndarray, workers: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Split each class among the workers in Dirichlet(alpha) proportions; no worker left empty."""
    buckets: list[list[np.ndarray]] = [[] for _ in range(workers)]
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        for worker, part in enumerate(np.split(members, _cut_points(rng, alpha, workers, len(members)))):
            buckets[worker].append(part)
    parts = [np.concatenate(b) for b in buckets]
    return _fill_empty(parts)


def _cut_points(rng: np.random.Generator, alpha: float, workers: int, size: int) -> np.ndarray:
    """Where to cut ``size`` shuffled examples so the pieces follow Dirichlet proportions."""
    share = rng.dirichlet(np.full(workers, alpha))
    share = np.nan_to_num(share, nan=0.0)
    if share.sum() <= 0:  # tiny alpha can underflow every component; give the class to one worker
        share = np.eye(workers)[rng.integers(workers)]
    return np.round(np.cumsum(share / share.sum())[:-1] * size).astype(np.int64)


def _fill_empty(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Move one example from the largest part into each empty one, so every worker can train."""
    for worker, part in enumerate(parts):
        if len(part) == 0:
            donor = max(range(len(parts)), key=lambda i: len(parts[i]))  # first largest: deterministic
            parts[worker], parts[donor] = parts[donor][-1:], parts[donor][:-1]
    return parts


# ----------------------------------------------------------------------------- batches
class BatchStream:
    """Infinite stream of one worker's batches of train indices.

    Each epoch is a fresh permutation of ``indices`` drawn from ``rng``, cut into
    batches of ``batch_size``; the last partial batch is dropped so every step sees
    the same batch size. The permutation is drawn lazily, when the epoch's first
    batch is asked for.
    """

    def __init__(self, indices: np.ndarray, batch_size: int, rng: np.random.Generator) -> None:
        self._indices = np.asarray(indices, dtype=np.int64).copy()
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        if len(self._indices) < batch_size:
            raise ValueError(
                f"a shard of {len(self._indices)} examples cannot fill one batch of {batch_size}; "
                f"lower the batch size or use fewer workers"
            )
        self.batch_size = batch_size
        self._rng = rng
        self._order: np.ndarray | None = None
        self._pos = 0
        self.epoch = 0  # completed epochs

    @property
    def batches_per_epoch(self) -> int:
        return len(self._indices) // self.batch_size

    def next(self) -> np.ndarray:
        """The next batch of ``batch_size`` indices (int64)."""
        if self._order is None:
            self._order = self._rng.permutation(self._indices)
            self._pos = 0
        batch = self._order[self._pos : self._pos + self.batch_size].copy()
        self._pos += self.batch_size
        if self._pos + self.batch_size > len(self._order):  # no full batch left: this epoch is done
            self.epoch += 1
            self._order = None
        return batch


class GlobalBatchStream:
    """iid sharding: one global permutation per epoch cut into global batches of ``workers * batch_size``.

    Worker ``i``'s ``k``-th batch is block ``i`` of global batch ``k``, so synchronous
    SGD over ``n`` workers sees exactly the batches of single-worker SGD with batch
    ``n * b`` over the same permutation. Workers may run ahead of each other
    (asynchronous training): a global batch is generated when the first worker
    needs it and dropped once every worker has taken its block.
    """

    def __init__(self, n_train: int, workers: int, batch_size: int, rng: np.random.Generator) -> None:
        if workers < 1:
            raise ValueError(f"need at least one worker, got {workers}")
        # Built on BatchStream so the global sequence matches it by construction.
        self._stream = BatchStream(np.arange(n_train), workers * batch_size, rng)
        self.workers = workers
        self.batch_size = batch_size
        self._taken = [0] * workers  # batches each worker has consumed
        # How many workers have consumed exactly k batches: finds the slowest worker in O(1)
        # amortised, where a min() over thousands of workers per step would not.
        self._at: dict[int, int] = {0: workers}
        self._buffer: deque[np.ndarray] = deque()  # global batches _first .. _first + len - 1
        self._first = 0  # always min(self._taken): the slowest worker's next batch

    @property
    def buffered_batches(self) -> int:
        """Global batches held because some worker has not consumed them yet."""
        return len(self._buffer)

    def next_for(self, worker: int) -> np.ndarray:
        """Worker ``worker``'s next batch of ``batch_size`` train indices."""
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker {worker} does not exist; workers are 0..{self.workers - 1}")
        k = self._taken[worker]
        while self._first + len(self._buffer) <= k:
            self._buffer.append(self._stream.next())
        block = self._buffer[k - self._first][
            worker * self.batch_size : (worker + 1) * self.batch_size
        ].copy()
        self._advance(worker, k)
        return block

    def _advance(self, worker: int, k: int) -> None:
        """Record that ``worker`` took batch ``k``; drop global batches every worker has consumed."""
        self._taken[worker] = k + 1
        self._at[k] -= 1
        self._at[k + 1] = self._at.get(k + 1, 0) + 1
        if self._at[k] == 0:
            del self._at[k]
        # Memory stays bounded by how far the fastest worker leads the slowest.
        while self._first not in self._at:
            self._buffer.popleft()
            self._first += 1
