"""Generic local tables: every branch (images, multilabel, text LM/classification, attrs, times) and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from leakbed.core.data.errors import DataError
from leakbed.core.data.table import load_table

COLORS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "gray": (128, 128, 128)}


def _images(root: Path) -> dict[str, Path]:
    (root / "img").mkdir(exist_ok=True)
    out = {}
    for name, rgb in COLORS.items():
        out[name] = root / "img" / f"{name}.png"
        Image.new("RGB", (20, 12), rgb).save(out[name])
    return out


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _photo_rows(root: Path) -> list[dict[str, Any]]:
    imgs = _images(root)
    return [
        {
            "user_id": "bob",
            "path": "img/red.png",
            "label": "cat",
            "timestamp": "2024-01-01T00:00:10Z",
            "city": "paris",
            "score": 1.5,
            "flash": True,
        },
        {
            "user_id": "alice",
            "path": str(imgs["green"]),
            "label": "dog",
            "timestamp": "2024-01-01T01:00:00+01:00",
            "city": "oslo",
            "score": 2.0,
            "flash": False,
        },
        {
            "user_id": "bob",
            "path": "img/blue.png",
            "label": "cat",
            "timestamp": "2024-01-01",
            "city": "oslo",
            "score": None,
            "flash": False,
        },
        {
            "user_id": "bob",
            "path": "img/gray.png",
            "label": "bird",
            "timestamp": "2024-01-02T00:00:00",
            "city": "rome",
            "score": 4.0,
            "flash": True,
        },
    ]


def test_images_jsonl_labels_times_attrs(tmp_path: Path) -> None:
    corpus = load_table(str(_jsonl(tmp_path / "photos.jsonl", _photo_rows(tmp_path))), image_size=8)
    assert corpus.name == "photos"
    assert corpus.task == "multiclass" and corpus.num_classes == 3  # bird, cat, dog
    assert corpus.input_shape == (3, 8, 8) and corpus.vocab is None
    assert corpus.user_ids == ["alice", "bob"]
    bob, alice = corpus.users["bob"], corpus.users["alice"]
    assert bob.x.dtype == np.float32 and bob.x.shape == (3, 3, 8, 8)
    np.testing.assert_allclose(bob.x[0].mean(axis=(1, 2)), [1.0, 0.0, 0.0])  # red, channels first
    np.testing.assert_allclose(bob.x[1].mean(axis=(1, 2)), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(bob.x[2], 128 / 255, rtol=1e-6)
    np.testing.assert_allclose(alice.x[0].mean(axis=(1, 2)), [0.0, 1.0, 0.0])  # absolute path
    np.testing.assert_array_equal(bob.y, [1, 1, 0])  # classes sorted: bird=0, cat=1, dog=2
    np.testing.assert_array_equal(alice.y, [2])
    assert bob.y.dtype == np.int64
    day = 1704067200.0  # 2024-01-01T00:00:00Z
    np.testing.assert_array_equal(bob.t, [day + 10, day, day + 86400])  # naive ISO = UTC
    np.testing.assert_array_equal(alice.t, [day])  # +01:00 offset honoured
    np.testing.assert_array_equal(bob.attrs["city"], [1, 0, 2])  # sorted codes: oslo=0, paris=1, rome=2
    np.testing.assert_array_equal(alice.attrs["city"], [0])
    np.testing.assert_array_equal(bob.attrs["score"], [1.5, np.nan, 4.0])
    np.testing.assert_array_equal(bob.attrs["flash"], [True, False, True])
    assert set(bob.attrs) == {"city", "score", "flash"}


def test_csv_numeric_labels_and_timestamps(tmp_path: Path) -> None:
    _images(tmp_path)
    pd.DataFrame(
        {
            "user_id": ["7", "7", "10", "7"],
            "path": ["img/red.png", "img/green.png", "img/blue.png", "img/gray.png"],
            "label": [10, 2, 2, 10],
            "timestamp": [5.0, 1.0, 3.5, 2.0],
            "device": ["b", "a", "b", "a"],
        }
    ).to_csv(tmp_path / "t.csv", index=False)
    corpus = load_table(str(tmp_path / "t.csv"), image_size=4)
    assert corpus.user_ids == ["10", "7"]  # ids stay text
    np.testing.assert_array_equal(corpus.users["7"].y, [1, 0, 1])  # 2 < 10 numerically
    np.testing.assert_array_equal(corpus.users["7"].t, [5.0, 1.0, 2.0])
    np.testing.assert_array_equal(corpus.users["7"].attrs["device"], [1, 0, 0])
    assert corpus.users["10"].x.shape == (1, 3, 4, 4)


def test_parquet_multilabel_lists_and_datetime(tmp_path: Path) -> None:
    _images(tmp_path)
    frame = pd.DataFrame(
        {
            "user_id": ["u1", "u2", "u1"],
            "path": ["img/red.png", "img/green.png", "img/blue.png"],
            "labels": [["sky", "dog"], [], ["dog"]],
            "timestamp": pd.to_datetime(["2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z", "2024-01-01T00:00:00Z"]),
        }
    )
    frame.to_parquet(tmp_path / "t.parquet")
    corpus = load_table(str(tmp_path / "t.parquet"))
    assert corpus.task == "multilabel" and corpus.num_classes == 2  # dog, sky
    assert corpus.input_shape == (3, 28, 28)
    u1 = corpus.users["u1"]
    assert u1.y.dtype == np.float32
    np.testing.assert_array_equal(u1.y, [[1, 1], [1, 0]])
    np.testing.assert_array_equal(corpus.users["u2"].y, [[0, 0]])
    np.testing.assert_array_equal(u1.t, [1704067201.0, 1704067200.0])


def test_multilabel_pipe_strings_and_row_order_time(tmp_path: Path) -> None:
    _images(tmp_path)
    pd.DataFrame(
        {
            "user_id": ["a", "b", "a", "a"],
            "path": ["img/red.png", "img/green.png", "img/blue.png", "img/gray.png"],
            "labels": ["beach|sun", "sun", "", "night | beach"],
        }
    ).to_csv(tmp_path / "m.csv", index=False)
    corpus = load_table(str(tmp_path / "m.csv"), image_size=8)
    assert corpus.task == "multilabel" and corpus.num_classes == 3  # beach, night, sun
    a = corpus.users["a"]
    np.testing.assert_array_equal(a.y, [[1, 0, 1], [0, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(a.t, [0, 1, 2])  # no timestamp: row order within the user
    np.testing.assert_array_equal(corpus.users["b"].t, [0])
    assert a.attrs == {}


def test_text_language_model_windows_and_vocab(tmp_path: Path) -> None:
    rows = [
        {"user_id": "u1", "text": "The cat sat on the mat. The END"},
        {"user_id": "u2", "text": "a dog, a cat"},
        {"user_id": "u1", "text": "zebra"},  # one word: no next-token target, no window
        {"user_id": "u2", "text": "Dog days", "mood": "happy"},
    ]
    corpus = load_table(str(_jsonl(tmp_path / "posts.jsonl", rows)), seq_len=4, vocab_size=7)
    assert corpus.task == "next-token" and corpus.input_shape == (4,)
    # counts: the 3, a 2, cat 2, dog 2, then ties at 1 broken alphabetically: days, end, ...
    assert corpus.vocab == ("<pad>", "<unk>", "the", "a", "cat", "dog", "days")
    assert corpus.num_classes == 7
    u1 = corpus.users["u1"]
    # the cat sat on the mat the end -> 2 4 1 1 2 1 2 1 ; windows of 5
    np.testing.assert_array_equal(u1.x, [[2, 4, 1, 1], [1, 2, 1, 0]])
    np.testing.assert_array_equal(u1.y, [[4, 1, 1, 2], [2, 1, 0, 0]])
    np.testing.assert_array_equal(u1.t, [0, 0])
    u2 = corpus.users["u2"]
    np.testing.assert_array_equal(u2.x, [[3, 5, 3, 4], [5, 6, 0, 0]])
    np.testing.assert_array_equal(u2.t, [0, 1])
    np.testing.assert_array_equal(u2.attrs["mood"], [-1, 0])  # missing string -> -1
    for u in corpus.users.values():
        np.testing.assert_array_equal(u.x[:, 1:], u.y[:, :-1])


def test_text_classification_and_text_multilabel(tmp_path: Path) -> None:
    pd.DataFrame(
        {
            "user_id": ["a", "b", "a"],
            "text": ["good good film", "bad", "one two three four five six"],
            "label": ["pos", "neg", "pos"],
            "likes": [3, 0, 7],
        }
    ).to_csv(tmp_path / "c.csv", index=False)
    corpus = load_table(str(tmp_path / "c.csv"), seq_len=4)
    assert corpus.task == "multiclass" and corpus.num_classes == 2 and corpus.input_shape == (4,)
    assert corpus.vocab is not None and corpus.vocab[2] == "good"
    a = corpus.users["a"]
    v = {w: i for i, w in enumerate(corpus.vocab)}
    np.testing.assert_array_equal(a.x, [[v["good"], v["good"], v["film"], 0], [v["one"], v["two"], v["three"], v["four"]]])
    np.testing.assert_array_equal(a.y, [1, 1])
    np.testing.assert_array_equal(a.attrs["likes"], [3, 7])
    assert a.attrs["likes"].dtype.kind == "i"

    rows = [{"user_id": "a", "text": "hi there", "labels": ["greet", "short"]}, {"user_id": "a", "text": "x", "labels": []}]
    multi = load_table(str(_jsonl(tmp_path / "ml.jsonl", rows)), seq_len=3)
    assert multi.task == "multilabel" and multi.num_classes == 2
    np.testing.assert_array_equal(multi.users["a"].y, [[1, 1], [0, 0]])
    assert multi.users["a"].x.shape == (2, 3)


def _expect(path: Path, message: str, **kwargs: Any) -> DataError:
    with pytest.raises(DataError, match=message) as err:
        load_table(str(path), **kwargs)
    assert "\n" not in str(err.value)
    assert path.name in str(err.value)
    return err.value


def test_errors(tmp_path: Path) -> None:
    _images(tmp_path)
    (tmp_path / "t.xlsx").write_text("x")
    _expect(tmp_path / "t.xlsx", "unknown table extension '.xlsx'")
    _expect(tmp_path / "absent.csv", "no such table file")
    _expect(_jsonl(tmp_path / "a.jsonl", [{"text": "hi", "label": 1}]), "missing required column 'user_id'")
    _expect(
        _jsonl(tmp_path / "b.jsonl", [{"user_id": 1, "text": "hi", "path": "img/red.png", "label": 1}]), "both 'text' and 'path'"
    )
    _expect(_jsonl(tmp_path / "c.jsonl", [{"user_id": 1, "label": 1}]), "neither 'text' nor 'path'")
    err = _expect(
        _jsonl(
            tmp_path / "d.jsonl",
            [{"user_id": 1, "path": "img/red.png", "label": 0}, {"user_id": 1, "path": "img/missing.png", "label": 1}],
        ),
        "row 1: cannot read image",
    )
    assert "missing.png" in str(err)
    (tmp_path / "img" / "junk.png").write_bytes(b"not a png")
    _expect(
        _jsonl(tmp_path / "e.jsonl", [{"user_id": 1, "path": "img/junk.png", "label": 0}]), "row 0: cannot read image .*junk.png"
    )
    _expect(_jsonl(tmp_path / "f.jsonl", [{"user_id": 1, "path": "img/red.png"}]), "need a 'label' or 'labels'")
    _expect(
        _jsonl(tmp_path / "g.jsonl", [{"user_id": 1, "text": "a b", "timestamp": "yesterday"}]),
        "row 0: timestamp 'yesterday' is not a number or ISO date",
    )
    (tmp_path / "h.jsonl").write_text('{"user_id": 1, "text": "a b"}\n{"user_id": 2,\n')
    _expect(tmp_path / "h.jsonl", "line 2: not valid JSON")
    _expect(_jsonl(tmp_path / "i.jsonl", [{"user_id": None, "text": "a b"}]), "row 0: missing user_id")
    _expect(_jsonl(tmp_path / "j.jsonl", [{"user_id": 1, "text": "a b", "label": None}]), "row 0: missing label")
    _expect(_jsonl(tmp_path / "k.jsonl", [{"user_id": 1, "text": "a", "label": 1, "labels": [1]}]), "both 'label' and 'labels'")
    (tmp_path / "empty.csv").write_text("user_id,text\n")
    _expect(tmp_path / "empty.csv", "no rows")
