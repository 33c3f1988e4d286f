"""TensorFlow Federated HDF5 text (Shakespeare) as a per-user next-character ``Corpus``.

TFF splits each role's lines into train and test files; the testbed does its own split, so
both files are merged per client id (train snippets first, then test snippets).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.data.errors import DataError

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD, UNK, BOS, EOS = range(len(SPECIALS))


def _h5_files(path: str) -> list[Path]:
    """One file, or a folder's ``*_train.h5`` then ``*_test.h5`` files."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise DataError(f"{p}: no such HDF5 file or folder")
    files = sorted(p.glob("*_train.h5")) + sorted(p.glob("*_test.h5"))
    if not files:
        raise DataError(f"{p}: no *_train.h5 or *_test.h5 files found")
    return files


def _read_snippets(file: Path) -> dict[str, list[str]]:
    """Every client's snippets in file order, decoded as UTF-8 (bad bytes become U+FFFD -> <unk>)."""
    import h5py

    out: dict[str, list[str]] = {}
    try:
        with h5py.File(file, "r") as fh:
            examples = fh.get("examples")
            if not isinstance(examples, h5py.Group):
                raise DataError(f"{file}: no /examples group (not a TFF HDF5 file)")
            for cid, group in examples.items():
                snippets = group.get("snippets") if isinstance(group, h5py.Group) else None
                if not isinstance(snippets, h5py.Dataset):
                    raise DataError(f"{file}: client {cid!r} has no 'snippets' dataset")
                raw = snippets[()]
                rows = np.atleast_1d(raw).tolist()
                out[str(cid)] = [r.decode("utf-8", errors="replace") if isinstance(r, bytes) else str(r) for r in rows]
    except DataError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{file}: cannot read TFF HDF5 ({first})") from None
    return out


def _printable(ch: str) -> bool:
    """Printable characters plus the newline and tab that separate verse lines."""
    return (ch.isprintable() or ch in "\n\t") and ch != "\ufffd"


def _windows(ids: np.ndarray, seq_len: int) -> np.ndarray:
    """Cut ids into non-overlapping windows of seq_len+1, padding the last with <pad>."""
    width = seq_len + 1
    n = -(-len(ids) // width)
    out = np.full(n * width, PAD, dtype=np.int64)
    out[: len(ids)] = ids
    return out.reshape(n, width)


def load_tff_hdf5(path: str, *, seq_len: int = 80) -> Corpus:
    """Load TFF-style ``/examples/<client_id>/snippets`` HDF5 data as next-character windows.

    Vocabulary: ``<pad>``, ``<unk>``, ``<bos>``, ``<eos>``, then the printable characters seen
    in the data, sorted by code point, so the same files always give the same ids. Each snippet
    is framed as ``<bos> chars <eos>`` and cut into windows of ``seq_len + 1`` ids (the last one
    padded with 0); ``x = window[:-1]`` and ``y = window[1:]``. ``t`` is the snippet's index in
    the client's merged list (its order in the play), shared by the windows cut from it.
    """
    if seq_len < 1:
        raise DataError(f"{path}: seq_len must be at least 1 (got {seq_len})")
    merged: dict[str, list[str]] = {}
    for file in _h5_files(path):
        for cid, rows in _read_snippets(file).items():
            merged.setdefault(cid, []).extend(rows)
    if not any(merged.values()):
        raise DataError(f"{path}: no snippets found")

    chars = sorted(ch for ch in set().union(*(set("".join(rows)) for rows in merged.values())) if _printable(ch))
    vocab = SPECIALS + tuple(chars)
    codes = np.array([ord(ch) for ch in chars], dtype=np.uint32)  # sorted, so searchsorted finds ids
    users: dict[str, UserData] = {}
    for cid in sorted(merged):
        rows = merged[cid]
        if not rows:
            continue
        xs: list[np.ndarray] = []
        ts: list[np.ndarray] = []
        for k, text in enumerate(rows):
            points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            pos = np.searchsorted(codes, points)
            pos_c = np.minimum(pos, max(len(codes) - 1, 0))
            known = (pos < len(codes)) & (codes[pos_c] == points) if len(codes) else np.zeros(len(points), bool)
            ids = np.where(known, pos_c + len(SPECIALS), UNK).astype(np.int64)
            win = _windows(np.concatenate(([BOS], ids, [EOS])), seq_len)
            xs.append(win)
            ts.append(np.full(len(win), k, dtype=np.float64))
        windows = np.concatenate(xs)
        users[cid] = UserData(
            x=np.ascontiguousarray(windows[:, :-1]),
            y=np.ascontiguousarray(windows[:, 1:]),
            t=np.concatenate(ts),
        )
    name = Path(path).resolve().stem if Path(path).is_file() else Path(path).resolve().name
    return Corpus(
        name=name,
        task="next-token",
        num_classes=len(vocab),
        input_shape=(seq_len,),
        users=users,
        vocab=vocab,
        time="row order",  # a snippet's place in the play, not a time
    )
