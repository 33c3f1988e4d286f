"""TFF HDF5 loader: the real Shakespeare files, and corrupt or incomplete ones."""

from __future__ import annotations

import string
from pathlib import Path

import h5py
import numpy as np
import pytest

from leakbed.core.data.corpus import Corpus
from leakbed.core.data.errors import DataError
from leakbed.core.data.tff_hdf5 import BOS, EOS, PAD, SPECIALS, load_tff_hdf5
from tests.conftest import SHARED_DATA

DATA = SHARED_DATA
SHAKESPEARE = DATA / "shakespeare"
ROLE = "MUCH_ADO_ABOUT_NOTHING_IAGO"  # 245 train + 28 test snippets (LEAF play prefixes are shuffled)


@pytest.fixture(scope="module")
def shakespeare() -> Corpus:
    return load_tff_hdf5(str(SHAKESPEARE))


def _raw(cid: str) -> list[str]:
    rows: list[str] = []
    for split in ("train", "test"):
        with h5py.File(SHAKESPEARE / f"shakespeare_{split}.h5", "r") as fh:
            if cid in fh["examples"]:
                rows += [b.decode("utf-8") for b in fh["examples"][cid]["snippets"][()]]
    return rows


@pytest.mark.shared_data("shakespeare")
def test_roles_and_vocabulary(shakespeare: Corpus) -> None:
    assert len(shakespeare.users) == 715
    assert shakespeare.user_ids == sorted(shakespeare.user_ids)
    assert ROLE in shakespeare.users
    assert shakespeare.task == "next-token"
    assert shakespeare.input_shape == (80,)
    vocab = shakespeare.vocab
    assert vocab is not None and vocab[:4] == SPECIALS == ("<pad>", "<unk>", "<bos>", "<eos>")
    chars = vocab[4:]
    assert list(chars) == sorted(chars) and len(set(chars)) == len(chars)
    assert set(string.ascii_letters) <= set(chars) and {" ", "\n", ".", ",", "'", "?", "!"} <= set(chars)
    assert all(c.isprintable() or c == "\n" for c in chars)
    assert len(vocab) == 82  # 78 characters occur in the merged files
    assert shakespeare.num_classes == len(vocab)


@pytest.mark.shared_data("shakespeare")
def test_windows_shift_by_one(shakespeare: Corpus) -> None:
    for u in shakespeare.users.values():
        assert u.x.dtype == u.y.dtype == np.int64 and u.x.shape == u.y.shape == (len(u), 80)
        np.testing.assert_array_equal(u.x[:, 1:], u.y[:, :-1])
        assert u.x.min() >= 0 and u.x.max() < shakespeare.num_classes
        assert np.all(np.diff(u.t) >= 0)


@pytest.mark.shared_data("shakespeare")
def test_merges_train_and_test_and_round_trips(shakespeare: Corpus) -> None:
    rows = _raw(ROLE)
    role = shakespeare.users[ROLE]
    assert len(role) == sum(-(-(len(r) + 2) // 81) for r in rows)  # <bos> + text + <eos>, 81 per window
    assert role.t.max() == len(rows) - 1
    vocab = shakespeare.vocab
    assert vocab is not None
    for k in (0, len(rows) - 1):  # first train snippet and last test snippet
        win = role.take(np.flatnonzero(role.t == k))
        ids = np.concatenate([win.x[:, :1], win.y], axis=1).reshape(-1)
        assert ids[0] == BOS
        ids = ids[ids != PAD]
        assert ids[-1] == EOS
        assert "".join(vocab[i] for i in ids[1:-1]) == rows[k]
    total = sum(sum(-(-(len(r) + 2) // 81) for r in _raw(c)) for c in shakespeare.user_ids[:20])
    assert total == sum(len(shakespeare.users[c]) for c in shakespeare.user_ids[:20])


@pytest.mark.shared_data("shakespeare")
def test_single_file_and_seq_len() -> None:
    corpus = load_tff_hdf5(str(SHAKESPEARE / "shakespeare_test.h5"), seq_len=20)
    assert len(corpus.users) == 715
    assert corpus.input_shape == (20,)
    u = corpus.users[ROLE]
    assert u.x.shape[1] == 20
    np.testing.assert_array_equal(u.x[:, 1:], u.y[:, :-1])


# The test's own files are written without HDF5's file lock: a process forked while a writer is open inherits its
# descriptor and with it the exclusive lock, and the loader's open then fails with EAGAIN (a measured suite run saw
# it in this test; reproduced with os.fork). The loader keeps HDF5's locking.
WRITE = {"mode": "w", "locking": False}


def _tiny(path: Path, clients: dict[str, list[bytes]]) -> None:
    with h5py.File(path, **WRITE) as fh:
        for cid, rows in clients.items():
            fh.create_dataset(f"examples/{cid}/snippets", data=np.array(rows, dtype=object), dtype=h5py.string_dtype())


def test_tiny_files_vocab_is_deterministic(tmp_path: Path) -> None:
    _tiny(tmp_path / "x_train.h5", {"B": [b"ba"], "A": ["h\xe9\x01".encode()]})
    _tiny(tmp_path / "x_test.h5", {"A": [b"c"]})
    corpus = load_tff_hdf5(str(tmp_path), seq_len=3)
    assert corpus.vocab == SPECIALS + ("a", "b", "c", "h", "\xe9")  # \x01 is not printable -> <unk>
    a = corpus.users["A"]
    np.testing.assert_array_equal(a.x, [[BOS, 7, 8], [EOS, 0, 0], [BOS, 6, EOS]])  # 4 ids per window
    np.testing.assert_array_equal(a.y, [[7, 8, 1], [0, 0, 0], [6, EOS, 0]])
    np.testing.assert_array_equal(a.t, [0, 0, 1])
    assert corpus.user_ids == ["A", "B"]


def test_corrupt_missing_and_wrong_layout(tmp_path: Path) -> None:
    bad = tmp_path / "bad_train.h5"
    bad.write_bytes(b"this is not hdf5")
    with pytest.raises(DataError, match=r"bad_train\.h5: cannot read TFF HDF5") as err:
        load_tff_hdf5(str(bad))
    assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="no such HDF5"):
        load_tff_hdf5(str(tmp_path / "absent.h5"))
    with pytest.raises(DataError, match="no \\*_train.h5"):
        load_tff_hdf5(str(_empty_dir(tmp_path)))
    other = tmp_path / "other.h5"
    with h5py.File(other, **WRITE) as fh:
        fh.create_dataset("data", data=np.arange(3))
    with pytest.raises(DataError, match=r"other\.h5: no /examples group"):
        load_tff_hdf5(str(other))
    nosnip = tmp_path / "nosnip.h5"
    with h5py.File(nosnip, **WRITE) as fh:
        fh.create_dataset("examples/A/lines", data=np.arange(3))
    with pytest.raises(DataError, match="client 'A' has no 'snippets'"):
        load_tff_hdf5(str(nosnip))


def _empty_dir(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d
