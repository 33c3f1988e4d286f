"""LEAF JSON loader: the real FEMNIST sample, a tiny text shard, and malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from leakbed.core.data.corpus import Corpus
from leakbed.core.data.errors import DataError
from leakbed.core.data.leaf import LEAF_SEQ_LEN, load_leaf
from tests.conftest import SHARED_DATA

DATA = SHARED_DATA
FEMNIST = DATA / "femnist"
SHARD = "all_data_0_niid_05_keep_0_{}_9.json"


@pytest.fixture(scope="module")
def femnist() -> Corpus:
    return load_leaf(str(FEMNIST))


@pytest.mark.shared_data("femnist")
def test_femnist_counts_and_shapes(femnist: Corpus) -> None:
    assert len(femnist.users) == 184
    assert sum(len(u) for u in femnist.users.values()) == 18_796
    assert femnist.user_ids == sorted(femnist.user_ids)
    assert femnist.task == "multiclass"
    assert femnist.num_classes == 62
    assert femnist.input_shape == (1, 28, 28)
    assert femnist.vocab is None
    for u in femnist.users.values():
        assert u.x.dtype == np.float32 and u.x.shape == (len(u), 1, 28, 28)
        assert u.y.dtype == np.int64 and u.y.min() >= 0 and u.y.max() <= 61
        assert u.t.dtype == np.float64
        np.testing.assert_array_equal(u.t, np.arange(len(u)))
    labels = np.concatenate([u.y for u in femnist.users.values()])
    assert len(np.unique(labels)) > 50  # digits and letters, not one class


@pytest.mark.shared_data("femnist")
def test_femnist_background_is_zero_after_inversion(femnist: Corpus) -> None:
    x = np.concatenate([u.x for u in femnist.users.values()])
    assert x.min() >= 0.0 and x.max() <= 1.0
    border = np.concatenate([x[:, 0, 0, :], x[:, 0, -1, :], x[:, 0, :, 0], x[:, 0, :, -1]], axis=1)
    assert border.mean() < 0.02  # LEAF background 1.0 became 0
    assert x.mean() < 0.3
    assert (x.reshape(len(x), -1).max(axis=1) > 0.5).mean() > 0.99  # ink is bright


@pytest.mark.shared_data("femnist")
def test_femnist_merges_train_and_test_in_file_order(femnist: Corpus) -> None:
    train_file, test_file = FEMNIST / "train" / SHARD.format("train"), FEMNIST / "test" / SHARD.format("test")
    train_only, test_only = load_leaf(str(train_file)), load_leaf(str(test_file))
    raw = json.loads(train_file.read_text())
    user = raw["users"][0]
    merged = femnist.users[user]
    n_test = len(test_only.users[user])
    assert len(merged) == n_test + len(train_only.users[user]) == n_test + raw["num_samples"][0]
    np.testing.assert_array_equal(merged.x[:n_test], test_only.users[user].x)  # test/ sorts before train/
    expected = 1.0 - np.asarray(raw["user_data"][user]["x"], dtype=np.float32).reshape(-1, 1, 28, 28)
    np.testing.assert_allclose(merged.x[n_test:], expected, atol=1e-6)
    np.testing.assert_array_equal(merged.y[n_test:], raw["user_data"][user]["y"])


@pytest.mark.shared_data("femnist")
def test_femnist_is_deterministic() -> None:
    a, b = load_leaf(str(FEMNIST / "test")), load_leaf(str(FEMNIST / "test"))
    assert a.user_ids == b.user_ids and len(a.users) == 184  # every writer has test examples
    for uid in a.user_ids:
        np.testing.assert_array_equal(a.users[uid].x, b.users[uid].x)
        np.testing.assert_array_equal(a.users[uid].y, b.users[uid].y)


@pytest.mark.shared_data("femnist")
def test_femnist_resize() -> None:
    corpus = load_leaf(str(FEMNIST / "test" / SHARD.format("test")), image_size=14)
    assert corpus.input_shape == (1, 14, 14)
    u = next(iter(corpus.users.values()))
    assert u.x.shape == (len(u), 1, 14, 14) and 0.0 <= u.x.min() and u.x.max() <= 1.0


def _write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_text_shards_become_char_windows(tmp_path: Path) -> None:
    line = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suf"
    assert len(line) == 81
    _write(
        tmp_path / "train" / "a.json",
        {"users": ["HAMLET"], "num_samples": [1], "user_data": {"HAMLET": {"x": [line[:80]], "y": [line[80]]}}},
    )
    _write(
        tmp_path / "test" / "b.json",
        {
            "users": ["HAMLET", "OPHELIA"],
            "num_samples": [1, 1],
            "user_data": {"HAMLET": {"x": ["abc"], "y": ["d"]}, "OPHELIA": {"x": ["Good my lord"], "y": [","]}},
        },
    )
    corpus = load_leaf(str(tmp_path))
    assert corpus.task == "next-token" and corpus.input_shape == (LEAF_SEQ_LEN,)
    assert corpus.vocab is not None and corpus.vocab[:2] == ("<pad>", "<unk>")
    assert list(corpus.vocab[2:]) == sorted(set(line + "abcdGood my lord,"))
    assert corpus.num_classes == len(corpus.vocab)
    assert corpus.user_ids == ["HAMLET", "OPHELIA"]
    ham = corpus.users["HAMLET"]
    assert ham.x.shape == ham.y.shape == (2, 80) and ham.x.dtype == ham.y.dtype == np.int64
    np.testing.assert_array_equal(ham.t, [0, 1])  # test/b.json sorts before train/a.json
    decode = "".join
    assert decode(corpus.vocab[i] for i in ham.x[0] if i) == "abcd"  # x + its next char
    assert decode(corpus.vocab[i] for i in ham.y[0] if i) == "bcd"
    assert decode(corpus.vocab[i] for i in ham.x[1]) == line[:80]
    assert decode(corpus.vocab[i] for i in ham.y[1]) == line[1:81]
    np.testing.assert_array_equal(ham.x[:, 1:][ham.y[:, :-1] > 0], ham.y[:, :-1][ham.y[:, :-1] > 0])


def test_malformed_json_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "shard.json"
    bad.write_text('{"users": ["u"], "user_data": {')
    with pytest.raises(DataError, match=r"shard\.json: not valid LEAF JSON") as err:
        load_leaf(str(tmp_path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"users": ["u"], "num_samples": [1]}, "needs 'users' list and 'user_data'"),
        ({"users": ["u"], "user_data": {}}, "listed in 'users' but has no 'user_data'"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.0] * 4]}}}, "lacks 'x' and 'y'"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.0] * 4], "y": [1, 2]}}}, "1 x rows but 2 y values"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.0] * 4, [0.0] * 3], "y": [1, 2]}}}, "ragged"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.0] * 4], "y": [1.5]}}}, "not non-negative integers"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.0] * 5], "y": [1]}}}, "not square images"),
    ],
)
def test_missing_keys_and_bad_values(tmp_path: Path, doc: dict, message: str) -> None:
    _write(tmp_path / "one.json", doc)
    with pytest.raises(DataError, match=message) as err:
        load_leaf(str(tmp_path))
    assert "one.json" in str(err.value) or str(tmp_path) in str(err.value)


def test_empty_or_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no \\*.json LEAF files"):
        load_leaf(str(tmp_path))
    with pytest.raises(DataError, match="no such LEAF folder"):
        load_leaf(str(tmp_path / "absent"))
    _write(tmp_path / "empty.json", {"users": [], "num_samples": [], "user_data": {}})
    with pytest.raises(DataError, match="hold no examples"):
        load_leaf(str(tmp_path))


def test_small_image_shard_keeps_femnist_label_space(tmp_path: Path) -> None:
    x = np.ones((3, 784)).tolist()
    _write(tmp_path / "s.json", {"users": ["w"], "num_samples": [3], "user_data": {"w": {"x": x, "y": [0, 3, 9]}}})
    corpus = load_leaf(str(tmp_path))
    assert corpus.num_classes == 62
    assert corpus.users["w"].x.max() == 0.0  # all-white page -> all background


def test_celeba_style_file_names_are_rejected(tmp_path: Path) -> None:
    _write(tmp_path / "c.json", {"users": ["7"], "user_data": {"7": {"x": ["000001.jpg"], "y": [1]}}})
    with pytest.raises(DataError, match="x rows name image files"):
        load_leaf(str(tmp_path))
