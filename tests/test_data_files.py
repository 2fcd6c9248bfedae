"""Data sets from the user's files (data.source.kind: arrays): .npz, .npy folders, Parquet, datasets."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import fred
from fred.numerics.data import load_dataset
from fred.runs.memory import data_shape
from fred.scenario.loading import validate
from fred.scenario.schema import ArraysData, DataConfig
from fred.tools.cli import main
from tests.conftest import tiny

N = 40


def arrays(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((n, 8, 8, 1), dtype=np.float32), (np.arange(n) % 10).astype(np.int64)


def load(path, eval_fraction: float = 0.25, **source):
    return load_dataset(
        DataConfig(source=ArraysData(path=str(path), **source), eval_fraction=eval_fraction),
        np.random.default_rng(0),
    )


def write_parquet(path, x, y, **more) -> None:
    flat = pa.array(list(x.reshape(len(x), -1)), type=pa.list_(pa.float32()))
    pq.write_table(pa.table({"pixels": flat, "label": y, **more}), path)


def test_an_uncompressed_npz_is_memory_mapped_and_a_compressed_one_read(tmp_path):
    x, y = arrays()
    np.savez(tmp_path / "stored.npz", images=x, labels=y, test_images=x[:8], test_labels=y[:8])
    np.savez_compressed(tmp_path / "packed.npz", images=x, labels=y)
    held = load(tmp_path / "stored.npz", x="images", y="labels", eval_path=str(tmp_path / "stored.npz"))
    assert isinstance(held.x_train, np.memmap)  # float32 as stored: the file's pages, no copy
    np.testing.assert_array_equal(held.x_train, x)
    np.testing.assert_array_equal(held.y_train, y)
    packed = load(tmp_path / "packed.npz", x="images", y="labels")
    assert not isinstance(packed.x_train, np.memmap)
    assert len(packed.x_train) == 30 and len(packed.x_eval) == 10 and packed.num_classes == 10
    assert packed.y_train.dtype == np.int32 and packed.feature_shape == (8, 8, 1)


def test_a_folder_of_npy_files_is_memory_mapped(tmp_path):
    x, y = arrays()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    data = load(tmp_path, eval_path=str(tmp_path))
    assert isinstance(data.x_train, np.memmap)
    np.testing.assert_array_equal(data.x_eval, x)


def test_parquet_gives_a_list_column_or_several_scalar_columns(tmp_path):
    x, y = arrays()
    write_parquet(tmp_path / "d.parquet", x, y, age=np.arange(N, dtype=np.float64), height=np.ones(N))
    images = load(tmp_path / "d.parquet", x="pixels", y="label", eval_path=str(tmp_path / "d.parquet"))
    np.testing.assert_array_equal(images.x_train, x.reshape(N, -1))
    table = load(
        tmp_path / "d.parquet", x=["age", "height"], y="label", eval_path=str(tmp_path / "d.parquet")
    )
    np.testing.assert_array_equal(
        table.x_train, np.stack([np.arange(N), np.ones(N)], axis=1).astype(np.float32)
    )


def test_a_datasets_folder_is_read_and_a_dataset_dict_names_its_splits(tmp_path):
    datasets = pytest.importorskip("datasets")  # the hf extra
    datasets.disable_progress_bars()
    x, y = arrays()
    whole = datasets.Dataset.from_dict({"image": x, "label": y})
    whole.save_to_disk(str(tmp_path / "one"))
    data = load(tmp_path / "one", x="image", y="label", eval_path=str(tmp_path / "one"))
    np.testing.assert_array_equal(data.x_train, x)
    datasets.DatasetDict({"train": whole, "test": whole}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(
        ValueError, match=r"holds several splits \(train, test\); name one folder: path: .*dict/train"
    ):
        load(tmp_path / "dict", x="image", y="label")


def test_regression_targets_and_given_classes(tmp_path):
    x, _ = arrays()
    np.savez(tmp_path / "r.npz", x=x, y=np.linspace(-1, 1, N))
    data = load(tmp_path / "r.npz", task="regression")
    assert data.task == "regression" and data.num_classes == 0 and data.y_train.dtype == np.float32
    np.savez(tmp_path / "c.npz", x=x, y=np.arange(N) % 3)
    assert load(tmp_path / "c.npz", classes=5).num_classes == 5


def test_the_memory_estimate_reads_the_shape_from_the_files(tmp_path):
    x, y = arrays()
    np.savez_compressed(tmp_path / "d.npz", x=x, y=y)
    write_parquet(tmp_path / "d.parquet", x, y)
    for source in (
        {"path": str(tmp_path / "d.npz")},
        {"path": str(tmp_path / "d.parquet"), "x": "pixels", "y": "label"},
    ):
        shape = data_shape(validate(tiny(data={"source": {"kind": "arrays", **source}})))
        assert (shape.examples, shape.outputs) == (N, 10), source
    assert data_shape(
        validate(tiny(data={"source": {"kind": "arrays", "path": str(tmp_path / "d.npz")}}))
    ).feature_shape == (8, 8, 1)


def test_an_npz_data_set_runs_end_to_end_and_the_same_twice(tmp_path):
    x, y = arrays(200)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    data = tiny(data={"source": {"kind": "arrays", "path": str(tmp_path / "d.npz")}})
    first, second = fred.run(data), fred.run(data)
    assert first.summary["status"] == "completed"
    assert first.summary["params_sha256"] == second.summary["params_sha256"]


def _bad(tmp_path, name: str):
    """Write the bad data set ``name``; return its source fields."""
    x, y = arrays()
    path = tmp_path / "d.npz"
    if name == "missing file":
        return {"path": str(tmp_path / "nowhere.npz")}
    if name == "missing key":
        np.savez(path, images=x, y=y)
    elif name == "one number an example":
        np.savez(path, x=x.reshape(-1)[:N], y=y)
    elif name == "one-hot labels":
        np.savez(path, x=x, y=np.eye(10)[y])
    elif name == "strings":
        np.savez(path, x=x, y=y.astype(str))
    elif name == "rows differ":
        np.savez(path, x=x, y=y[:-1])
    elif name == "label out of range":
        np.savez(path, x=x, y=np.where(np.arange(N) == 7, 12, y))
        return {"path": str(path), "classes": 10}
    elif name == "negative label":
        np.savez(path, x=x, y=np.where(np.arange(N) == 3, -1, y))
    elif name == "fractional label":
        np.savez(path, x=x, y=y + 0.5)
    elif name == "nan rows":
        bad = x.copy()
        bad[[2, 5], 0, 0, 0], bad[9, 1, 1, 0] = np.nan, np.inf
        np.savez(path, x=bad, y=y)
    elif name == "empty split":
        np.savez(path, x=x, y=y)
        np.savez(tmp_path / "e.npz", x=x[:0], y=y[:0])
        return {"path": str(path), "eval_path": str(tmp_path / "e.npz")}
    elif name == "not a data file":
        path.write_text("x,y\n1,2\n")
    elif name == "parquet nulls":
        path = tmp_path / "d.parquet"
        pq.write_table(pa.table({"x": pa.array([1.0, None, 3.0]), "y": [0, 1, 0]}), path)
    elif name == "ragged lists":
        path = tmp_path / "d.parquet"
        pq.write_table(pa.table({"x": pa.array([[1.0, 2.0], [3.0]]), "y": [0, 1]}), path)
    return {"path": str(path)}


BAD = {
    "missing file": "nowhere.npz does not exist; give an .npz file, a folder of .npy files, a .parquet file",
    "missing key": "has no key 'x'; it has images, y (set data.source.x and y to them)",
    "one number an example": "'x' has shape (40,); give each example as an array",
    "one-hot labels": "'y' has shape (40, 10); give one label or target per example",
    "strings": "'y' holds <U21 values; it needs numbers",
    "rows differ": "'x' has 40 rows but 'y' has 39; give one label per example",
    "label out of range": "1 label in 'y' is outside 0..9 (classes is 10; rows 7 hold 12)",
    "negative label": "1 label in 'y' is outside 0..9 (10 classes; rows 3 hold -1)",
    "fractional label": "'y' holds 40 labels that are not whole numbers",
    "nan rows": "3 of 40 rows hold NaN or infinite values (rows 2, 5, 9); drop or fix them",
    "empty split": "data.source.eval_path: ",
    "not a data file": "is neither an .npz (zip) file nor a Parquet file",
    "parquet nulls": "column 'x' has 1 missing (null) values (at 1); drop or fill them",
    "ragged lists": "column 'x' holds lists of 2 lengths (1, 2); every example needs the same shape",
}


@pytest.mark.parametrize("name", BAD)
def test_bad_data_is_exit_2_with_the_fix_and_nothing_written(name, tmp_path, capsys):
    scenario = tiny(data={"source": {"kind": "arrays", **_bad(tmp_path, name)}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert BAD[name] in err and "data.source." in err and "Traceback" not in err
    if name == "empty split":
        assert "holds no examples" in err
    assert not (tmp_path / "run").exists()


def test_several_columns_are_for_tables_not_arrays(tmp_path):
    x, y = arrays()
    np.savez(tmp_path / "d.npz", x=x, y=y)
    with pytest.raises(
        ValueError, match=r"holds arrays, not columns: give data.source.x one key, not \['a', 'b'\]"
    ):
        load(tmp_path / "d.npz", x=["a", "b"])
