"""LEAF JSON shards (FEMNIST images, Shakespeare/Sent140 text) as a per-user ``Corpus``.

LEAF's own train/test split is not used: the testbed splits each user's data by its own
prior/private rule, so every shard under the folder is read and a user's examples are merged.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.data.errors import DataError
from leakbed.core.data.handwriting import with_style_attributes

LEAF_SEQ_LEN = 80  # LEAF's Shakespeare window: 80 characters predict the 81st
FEMNIST_CLASSES = 62  # 10 digits + 26 upper + 26 lower case letters
_SPECIALS = ("<pad>", "<unk>")


def _natural_key(path: Path, root: Path) -> list[Any]:
    """Sort ``all_data_2`` before ``all_data_10`` so "file order" means shard order."""
    rel = path.relative_to(root).as_posix() if path != root else path.name
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", rel)]


def _json_files(path: str) -> list[Path]:
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise DataError(f"{root}: no such LEAF folder or file")
    files = sorted((p for p in root.rglob("*.json") if p.is_file()), key=lambda p: _natural_key(p, root))
    if not files:
        raise DataError(f"{root}: no *.json LEAF files found")
    return files


def _read_shard(file: Path) -> dict[str, dict[str, list[Any]]]:
    """One shard's ``user_data``, checked for the keys LEAF promises."""
    try:
        with file.open("rb") as fh:
            doc = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{file}: not valid LEAF JSON ({first})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("users"), list) or not isinstance(doc.get("user_data"), dict):
        raise DataError(f"{file}: not a LEAF shard (needs 'users' list and 'user_data' object)")
    user_data = doc["user_data"]
    for user in doc["users"]:
        if str(user) not in user_data:
            raise DataError(f"{file}: user {user!r} is listed in 'users' but has no 'user_data'")
    for user, rec in user_data.items():
        if not isinstance(rec, dict) or not isinstance(rec.get("x"), list) or not isinstance(rec.get("y"), list):
            raise DataError(f"{file}: user {user!r} lacks 'x' and 'y' lists")
        if len(rec["x"]) != len(rec["y"]):
            raise DataError(f"{file}: user {user!r} has {len(rec['x'])} x rows but {len(rec['y'])} y values")
    return user_data


def _row_text(row: Any, file: Path, user: str) -> str:
    """Shakespeare rows are strings; Sent140 rows are lists whose last field is the text."""
    if isinstance(row, str):
        return row
    if isinstance(row, list) and row and isinstance(row[-1], str):
        return row[-1]
    raise DataError(f"{file}: user {user!r} mixes text and non-text x rows")


def _kind(user_data: dict[str, dict[str, list[Any]]]) -> str | None:
    for rec in user_data.values():
        if rec["x"]:
            row = rec["x"][0]
            if isinstance(row, str) or (isinstance(row, list) and row and isinstance(row[-1], str)):
                return "text"
            return "image"
    return None


def _reject_image_names(file: Path, user_data: dict[str, dict[str, list[Any]]]) -> None:
    """LEAF CelebA rows are image file names, not text: say so instead of modelling file names."""
    row = next(rec["x"][0] for rec in user_data.values() if rec["x"])
    if isinstance(row, str) and re.fullmatch(r"[\w.-]+\.(jpe?g|png|bmp|gif)", row.strip(), re.IGNORECASE):
        raise DataError(f"{file}: x rows name image files ({row!r}); list them in a table and use source = table")


def _resize(images: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of (n, 1, s, s) float images; one PIL call per image, not per pixel."""
    from PIL import Image

    out = np.empty((len(images), 1, size, size), dtype=np.float32)
    for i, img in enumerate(images):
        pil = Image.fromarray(img[0], mode="F").resize((size, size), Image.Resampling.BILINEAR)
        out[i, 0] = np.asarray(pil, dtype=np.float32)
    return np.clip(out, 0.0, 1.0)


def load_leaf(path: str, *, image_size: int = 28) -> Corpus:
    """Load every LEAF ``*.json`` under ``path`` (train and test shards alike), merged per user.

    Images (rows of side*side floats, FEMNIST) become float32 (n, 1, S, S) with inverted
    intensity (LEAF draws ink on a white 1.0 background; we want background 0), resized to
    ``image_size`` when it differs. Text rows (Shakespeare strings, Sent140 field lists) become
    80-character next-token windows over a character vocabulary ``<pad>``, ``<unk>``, then the
    sorted characters seen; a string ``y`` (Shakespeare's next character) is appended first,
    while Sent140's sentiment labels are not used.

    LEAF has no timestamps: ``t`` is the example's index in the user's merged list (shards in
    natural file order, rows in file order), a stand-in for capture order. Images get the style
    attributes of ``core.data.handwriting`` (bold strokes as the binary property, the writer's
    stroke weight and slant).
    """
    files = _json_files(path)
    kind: str | None = None
    images: dict[str, list[np.ndarray]] = {}
    labels: dict[str, list[np.ndarray]] = {}
    texts: dict[str, list[str]] = {}
    for file in files:
        user_data = _read_shard(file)
        shard_kind = _kind(user_data)
        if shard_kind is None:
            continue
        if kind is None:
            kind = shard_kind
            _reject_image_names(file, user_data)
        elif kind != shard_kind:
            raise DataError(f"{file}: {shard_kind} rows, but earlier shards hold {kind} rows")
        for user, rec in user_data.items():
            uid = str(user)
            if not rec["x"]:
                continue
            if kind == "text":
                ys = rec["y"]
                rows = [_row_text(r, file, uid) for r in rec["x"]]
                rows = [r + yv if isinstance(yv, str) else r for r, yv in zip(rows, ys, strict=True)]
                texts.setdefault(uid, []).extend(rows)
                continue
            try:
                x = np.asarray(rec["x"], dtype=np.float32).reshape(len(rec["x"]), -1)
                y_raw = np.asarray(rec["y"], dtype=np.float64)
            except (ValueError, TypeError):
                raise DataError(f"{file}: user {uid!r} has ragged or non-numeric x/y rows") from None
            if y_raw.ndim != 1 or np.any(y_raw != np.round(y_raw)) or np.any(y_raw < 0):
                raise DataError(f"{file}: user {uid!r} has labels that are not non-negative integers")
            images.setdefault(uid, []).append(x)
            labels.setdefault(uid, []).append(y_raw.astype(np.int64))
    if kind is None:
        raise DataError(f"{path}: LEAF files hold no examples")
    name = Path(path).resolve().name
    if kind == "text":
        return _text_corpus(name, texts)
    return _image_corpus(name, path, images, labels, image_size)


def _image_corpus(
    name: str, path: str, images: dict[str, list[np.ndarray]], labels: dict[str, list[np.ndarray]], image_size: int
) -> Corpus:
    widths = {a.shape[1] for parts in images.values() for a in parts}
    if len(widths) != 1:
        raise DataError(f"{path}: image rows have differing lengths {sorted(widths)}")
    width = widths.pop()
    side = math.isqrt(width)
    if side * side != width:
        raise DataError(f"{path}: image rows of {width} values are not square images")
    users: dict[str, UserData] = {}
    max_label = -1
    for uid in sorted(images):
        flat = np.concatenate(images[uid])
        x = 1.0 - flat.reshape(-1, 1, side, side)  # LEAF background 1.0 (white) -> 0
        x = np.clip(x, 0.0, 1.0, out=x)
        if image_size != side:
            x = _resize(x, image_size)
        y = np.concatenate(labels[uid])
        if len(y):
            max_label = max(max_label, int(y.max()))
        users[uid] = UserData(x=x, y=y, t=np.arange(len(y), dtype=np.float64))
    num_classes = max_label + 1
    if side == 28 and max_label <= FEMNIST_CLASSES - 1:
        num_classes = FEMNIST_CLASSES  # FEMNIST: a sample may miss classes; keep the full label space
    return Corpus(
        name=name,
        task="multiclass",
        num_classes=num_classes,
        input_shape=(1, image_size, image_size),
        users=with_style_attributes(users),  # FEMNIST has no attribute column: measure the writing style
        time="row order",
    )


def _text_corpus(name: str, texts: dict[str, list[str]]) -> Corpus:
    chars = sorted(set().union(*(set("".join(rows)) for rows in texts.values())))
    vocab = _SPECIALS + tuple(chars)
    index = {ch: i for i, ch in enumerate(vocab) if i >= len(_SPECIALS)}
    unk = _SPECIALS.index("<unk>")
    users: dict[str, UserData] = {}
    for uid in sorted(texts):
        rows = texts[uid]
        x = np.zeros((len(rows), LEAF_SEQ_LEN), dtype=np.int64)
        y = np.zeros((len(rows), LEAF_SEQ_LEN), dtype=np.int64)
        for i, row in enumerate(rows):
            ids = np.fromiter((index.get(ch, unk) for ch in row[: LEAF_SEQ_LEN + 1]), dtype=np.int64)
            head, tail = ids[:LEAF_SEQ_LEN], ids[1 : LEAF_SEQ_LEN + 1]
            x[i, : len(head)] = head
            y[i, : len(tail)] = tail
        users[uid] = UserData(x=x, y=y, t=np.arange(len(rows), dtype=np.float64))
    return Corpus(
        name=name,
        task="next-token",
        num_classes=len(vocab),
        input_shape=(LEAF_SEQ_LEN,),
        users=users,
        vocab=vocab,
        time="row order",
    )
