"""The ``data`` section: where examples come from, and the batch each worker draws."""

from __future__ import annotations

import os
import stat
from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from fred.scenario.schema.base import NonNegFloat, PositiveFloat, Section, _absolute

NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _file_or_folder(value: str | None) -> str | None:
    """``value`` as an absolute path, refused where it names a FIFO, a device or a socket: read as
    data, a FIFO blocks for ever and /dev/zero never ends. A path that is not there is left to the
    loader, which names what it should hold (a run's copy of a scenario may outlive its data)."""
    path = _absolute(value)
    try:
        mode = os.stat(path).st_mode if path is not None else None
    except (OSError, ValueError):  # missing, unreadable, a name too long: the loader says which
        return path
    what = next((name for test, name in NOT_REGULAR if mode is not None and test(mode)), None)
    if what is not None:
        raise ValueError(
            f"{path} is {what}, not a file or folder: fred would read it for ever (or wait on "
            "it); give a file or folder of the data, saved to disk"
        )
    return path


def _regular_file(value: str) -> str:
    """``value`` as an absolute path, refused where it names anything but a regular file (a folder too)."""
    path = _file_or_folder(value)
    assert path is not None
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder; give a text file")
    return path


class DigitsData(Section):
    kind: Literal["digits"] = "digits"


class SyntheticData(Section):
    kind: Literal["synthetic"] = "synthetic"
    task: Literal["classification", "regression"] = "classification"
    examples: Annotated[int, Field(ge=2)] = 2000
    features: Annotated[int, Field(ge=1)] = 20
    classes: Annotated[int, Field(ge=2)] = 4
    noise: NonNegFloat = 0.5


class MNISTData(Section):
    kind: Literal["mnist"] = "mnist"
    path: str = Field(
        description="a directory of IDX files (optionally .gz) or one .npz file; a relative path is "
        "taken from the scenario file's folder"
    )

    _path_absolute = field_validator("path")(_file_or_folder)


class SyntheticImagesData(Section):
    """CIFAR-shaped images (32 x 32 x 3) that a model can learn: a fixed random template per class,
    shifted at random and noised per example."""

    kind: Literal["synthetic_images"] = "synthetic_images"
    examples: Annotated[int, Field(ge=2, le=10_000_000)] = 2000
    classes: Annotated[int, Field(ge=2, le=1000)] = 10
    noise: Annotated[float, Field(ge=0, le=10)] = Field(
        default=0.3, description="per-pixel Gaussian noise's standard deviation"
    )
    shift: Annotated[int, Field(ge=0, le=16)] = Field(
        default=4, description="the most pixels a template is moved each way"
    )


class SyntheticTokensData(Section):
    """Token sequences from a random sparse Markov chain: each token is followed by one of
    ``branching`` tokens of its own, so a model can bring the loss far below log(vocab)."""

    kind: Literal["synthetic_tokens"] = "synthetic_tokens"
    examples: Annotated[int, Field(ge=2, le=10_000_000)] = Field(default=2000, description="sequences")
    vocab: Annotated[int, Field(ge=2, le=1_000_000)] = 64
    context: Annotated[int, Field(ge=1, le=65536)] = Field(default=32, description="tokens a sequence")
    branching: Annotated[int, Field(ge=1)] = Field(default=4, description="successors each token may have")

    @model_validator(mode="after")
    def _branching_within_vocab(self) -> "SyntheticTokensData":
        if self.branching > self.vocab:
            raise ValueError(
                f"branching {self.branching} exceeds vocab {self.vocab}: a token has at most vocab "
                "successors; give branching at most vocab"
            )
        return self


class CIFAR10Data(Section):
    kind: Literal["cifar10"] = "cifar10"
    path: str = Field(
        description="the cifar-10-batches-py folder (data_batch_1..5, test_batch) or the folder holding it"
    )

    _path_absolute = field_validator("path")(_file_or_folder)


class CIFAR100Data(Section):
    kind: Literal["cifar100"] = "cifar100"
    path: str = Field(description="the cifar-100-python folder (train, test) or the folder holding it")
    labels: Literal["fine", "coarse"] = Field(
        default="fine", description="fine: 100 classes; coarse: 20 superclasses"
    )

    _path_absolute = field_validator("path")(_file_or_folder)


class TextData(Section):
    """A text file as tokens, cut into windows of ``context`` tokens, each labelled with the next ones."""

    kind: Literal["text"] = "text"
    path: str = Field(description="a text file (a relative path is taken from the scenario file's folder)")
    level: Literal["byte", "char"] = Field(
        default="byte",
        description="byte: 256 tokens, the file's bytes; char: one token per character it uses (UTF-8)",
    )
    context: Annotated[int, Field(ge=1, le=65536)] = Field(default=64, description="tokens a window")

    _path_absolute = field_validator("path")(_regular_file)


class ArraysData(Section):
    """Examples from the user's files: an ``.npz``, a folder of ``.npy`` files, a Parquet file, or a
    Hugging Face ``datasets`` folder written by ``save_to_disk``."""

    kind: Literal["arrays"] = "arrays"
    path: str = Field(
        description="an .npz file, a folder of .npy files, a .parquet file, or a datasets save_to_disk folder"
    )
    x: str | Annotated[list[str], Field(min_length=1)] = Field(
        default="x", description="the features' key, file stem or column; several columns for tabular data"
    )
    y: str = Field(default="y", description="the labels' (or targets') key, file stem or column")
    eval_path: str | None = Field(
        default=None,
        description="the held-out split, in the same format and names "
        "(default: hold out data.eval_fraction of path)",
    )
    task: Literal["classification", "regression"] = "classification"
    classes: Annotated[int, Field(ge=2)] | None = Field(
        default=None, description="number of classes (default: the largest label + 1)"
    )

    _paths_absolute = field_validator("path", "eval_path")(_file_or_folder)

    @model_validator(mode="after")
    def _classes_with_classification(self) -> "ArraysData":
        if self.task == "regression" and self.classes is not None:
            raise ValueError(
                f"classes {self.classes} is given with task 'regression', which has no classes; leave it out"
            )
        return self


DataSource = Annotated[
    Union[
        DigitsData,
        SyntheticData,
        SyntheticImagesData,
        SyntheticTokensData,
        MNISTData,
        CIFAR10Data,
        CIFAR100Data,
        TextData,
        ArraysData,
    ],
    Field(discriminator="kind"),
]
SEQUENCE_SOURCES = ("text", "synthetic_tokens")  # labels are sequences: the next token at every position


class DataConfig(Section):
    source: DataSource = Field(default_factory=DigitsData)
    eval_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    batch_size: Annotated[int, Field(ge=1)] = 32
    sharding: Literal["iid", "by_label", "dirichlet"] = "iid"
    dirichlet_alpha: PositiveFloat = 0.5
    eval_examples: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="evaluate on at most this many held-out examples"
    )
