"""Flower Datasets NaturalIdPartitioner loader on local Parquet shaped like hub FEMNIST."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from leakbed.core.data.errors import DataError
from leakbed.core.data.leaf import load_leaf
from leakbed.core.data.natural_id import load_flwr_datasets
from tests.conftest import SHARED_DATA

DATA = SHARED_DATA
FEMNIST_SHARD = DATA / "femnist" / "test" / "all_data_0_niid_05_keep_0_test_9.json"


def _png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _femnist_writers(k: int = 3) -> tuple[list[str], dict[str, dict[str, list]]]:
    doc = json.loads(FEMNIST_SHARD.read_text())
    return doc["users"][:k], doc["user_data"]


@pytest.mark.shared_data("femnist")
def test_hub_shaped_parquet_from_femnist_writers(tmp_path: Path) -> None:
    """Rows as the hub stores them: writer_id, an HF Image feature (PNG bytes), a ClassLabel character."""
    import datasets

    writers, user_data = _femnist_writers()
    rows: dict[str, list] = {"writer_id": [], "image": [], "character": [], "hsf_id": []}
    for w in writers:  # white-background 8-bit scans, like flwrlabs/femnist
        for x, y in zip(user_data[w]["x"], user_data[w]["y"], strict=True):
            pixels = np.round(np.asarray(x, dtype=np.float32).reshape(28, 28) * 255).astype(np.uint8)
            rows["writer_id"].append(w)
            rows["image"].append({"bytes": _png(pixels), "path": None})
            rows["character"].append(y)
            rows["hsf_id"].append(int(w[1:5]) % 7)
    features = datasets.Features(
        {
            "writer_id": datasets.Value("string"),
            "image": datasets.Image(),
            "character": datasets.ClassLabel(num_classes=62),
            "hsf_id": datasets.Value("int64"),
        }
    )
    order = np.random.default_rng(0).permutation(len(rows["writer_id"]))  # writers interleaved in the file
    shuffled = {k: [v[i] for i in order] for k, v in rows.items()}
    datasets.Dataset.from_dict(shuffled, features=features).to_parquet(str(tmp_path / "femnist.parquet"))

    corpus = load_flwr_datasets(str(tmp_path / "femnist.parquet"), partition_by="writer_id")
    assert corpus.user_ids == sorted(writers)
    assert corpus.task == "multiclass" and corpus.num_classes == 62
    assert corpus.input_shape == (1, 28, 28)
    leaf = load_leaf(str(FEMNIST_SHARD))
    for w in writers:
        u = corpus.users[w]
        assert len(u) == len(user_data[w]["y"])
        assert u.x.dtype == np.float32 and u.x.shape == (len(u), 1, 28, 28)
        # Rows keep file order within a writer; match them back to the LEAF originals.
        mine = order[np.isin(order, [i for i, r in enumerate(rows["writer_id"]) if r == w])]
        first = min(i for i, r in enumerate(rows["writer_id"]) if r == w)
        idx = mine - first
        np.testing.assert_array_equal(u.y, leaf.users[w].y[idx])
        np.testing.assert_allclose(u.x, leaf.users[w].x[idx], atol=0.5 / 255 + 1e-6)  # inverted like LEAF
        np.testing.assert_array_equal(u.t, np.arange(len(u)))
        np.testing.assert_array_equal(u.attrs["hsf_id"], int(w[1:5]) % 7)
    assert set(corpus.users[writers[0]].attrs) == {"hsf_id"}


def test_plain_struct_images_string_labels_and_resize(tmp_path: Path) -> None:
    """A Parquet written by pandas: the image is a bare {bytes, path} struct, labels are strings."""
    black = np.zeros((10, 10), np.uint8)
    black[3:7, 3:7] = 255  # white ink on black: no inversion
    recs = [
        {"uid": u, "image": {"bytes": _png(black), "path": None}, "label": lab, "session": s}
        for u, lab, s in [(2, "b", "x"), (1, "a", "y"), (2, "c", "x"), (3, "a", "x"), (2, "a", "y")]
    ]
    pd.DataFrame(recs).to_parquet(tmp_path / "own.parquet")
    corpus = load_flwr_datasets(str(tmp_path / "own.parquet"), partition_by="uid", image_size=20)
    assert corpus.user_ids == ["1", "2", "3"]
    assert [len(corpus.users[u]) for u in corpus.user_ids] == [1, 3, 1]
    assert corpus.num_classes == 3 and corpus.input_shape == (1, 20, 20)
    two = corpus.users["2"]
    np.testing.assert_array_equal(two.y, [1, 2, 0])
    np.testing.assert_array_equal(two.attrs["session"], [0, 0, 1])
    assert two.x[0, 0, 0, 0] == 0.0 and two.x[0, 0, 10, 10] == pytest.approx(1.0)


def test_flat_pixels_column_in_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [{"writer": f"w{i % 2}", "pixels": [0, 255, 0, 255], "label": i % 3} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = load_flwr_datasets(str(path), partition_by="writer", image_size=8)
    assert corpus.user_ids == ["w0", "w1"] and [len(u) for u in corpus.users.values()] == [3, 2]
    assert corpus.num_classes == 3 and corpus.users["w0"].x.shape == (3, 1, 8, 8)
    np.testing.assert_array_equal(corpus.users["w0"].y, [0, 2, 1])


def test_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_flwr_datasets(str(tmp_path / "absent.parquet"), partition_by="writer_id")
    pd.DataFrame({"writer_id": ["a"], "label": [1]}).to_parquet(tmp_path / "noimg.parquet")
    with pytest.raises(DataError, match="no image column"):
        load_flwr_datasets(str(tmp_path / "noimg.parquet"), partition_by="writer_id")
    with pytest.raises(DataError, match="no column 'user' to partition by"):
        load_flwr_datasets(str(tmp_path / "noimg.parquet"), partition_by="user")
    pd.DataFrame({"writer_id": ["a", None], "x": [[0.0] * 4, [1.0] * 4], "label": [1, 2]}).to_parquet(tmp_path / "noid.parquet")
    with pytest.raises(DataError, match="cannot partition by 'writer_id'"):
        load_flwr_datasets(str(tmp_path / "noid.parquet"), partition_by="writer_id")
    (tmp_path / "data.txt").write_text("x")
    with pytest.raises(DataError, match="unknown extension"):
        load_flwr_datasets(str(tmp_path / "data.txt"), partition_by="writer_id")

    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # fail fast instead of retrying DNS
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match=r"^cannot load flwrlabs/femnist from the hub \(offline\?\)") as err:
        load_flwr_datasets("flwrlabs/femnist", partition_by="writer_id")
    assert "\n" not in str(err.value)
