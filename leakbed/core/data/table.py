"""A generic local table (JSONL, CSV or Parquet) with one row per example and a ``user_id``.

This is the way in for a user's own data: photo folders listed by path, posts or messages as
text, with optional capture times and any per-example attributes (for property inference).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from leakbed.core.data.corpus import Corpus, Task, UserData
from leakbed.core.data.errors import DataError

RESERVED = ("user_id", "timestamp", "text", "path", "label", "labels")
_WORD = re.compile(r"\w+")


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _read_jsonl(file: Path) -> pd.DataFrame:
    """Parse line by line so a bad line is reported by number, and values keep their JSON types."""
    records: list[dict[str, Any]] = []
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{file}: line {lineno}: not valid JSON ({_one_line(err)})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{file}: line {lineno}: expected a JSON object per line")
            records.append(rec)
    return pd.DataFrame.from_records(records)


def read_frame(path: str) -> pd.DataFrame:
    """The table as a DataFrame; unknown extensions and unreadable files raise ``DataError``."""
    file = Path(path)
    ext = file.suffix.lower()
    if ext not in (".jsonl", ".csv", ".parquet"):
        raise DataError(f"{file}: unknown table extension {ext or '(none)'!r}; use .jsonl, .csv or .parquet")
    if not file.is_file():
        raise DataError(f"{file}: no such table file")
    try:
        if ext == ".jsonl":
            frame = _read_jsonl(file)
        elif ext == ".csv":
            frame = pd.read_csv(file, dtype={"user_id": str, "text": str, "path": str, "labels": str})
        else:
            frame = pd.read_parquet(file)
    except DataError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise DataError(f"{file}: cannot read table ({_one_line(err)})") from None
    frame.columns = [str(c) for c in frame.columns]
    if len(frame) == 0:
        raise DataError(f"{file}: table has no rows")
    return frame.reset_index(drop=True)


def _is_null(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(isinstance(v, float) and math.isnan(v)) or v is pd.NaT or v is pd.NA
    except TypeError:
        return False


def parse_times(col: pd.Series, file: Path) -> np.ndarray:
    """Numbers are seconds as given; ISO date strings or datetimes become UTC epoch seconds (naive = UTC)."""
    if pd.api.types.is_datetime64_any_dtype(col):
        stamps = pd.to_datetime(col, utc=True)
    elif pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        out = col.to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(out))
        if len(bad):
            raise DataError(f"{file}: row {bad[0]}: missing or non-finite timestamp")
        return out
    else:
        numeric = pd.to_numeric(col, errors="coerce")
        if numeric.notna().all():
            return numeric.to_numpy(dtype=np.float64)
        stamps = pd.to_datetime(col.astype("string"), utc=True, errors="coerce", format="ISO8601")
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if len(bad):
        raise DataError(f"{file}: row {bad[0]}: timestamp {col.iloc[bad[0]]!r} is not a number or ISO date")
    ns = stamps.astype("datetime64[ns, UTC]").to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return ns.astype(np.float64) / 1e9


def label_token(v: Any) -> str:
    """Labels compare as text, so 3, 3.0 and "3" are one class."""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, Real) and float(v).is_integer():
        return str(int(v))
    return str(v).strip()


def sorted_classes(tokens: set[str]) -> list[str]:
    """Class names in sorted order: numerically when all look like integers, else as text."""
    if tokens and all(re.fullmatch(r"[+-]?\d+", t) for t in tokens):
        return sorted(tokens, key=int)
    return sorted(tokens)


def _single_labels(col: pd.Series, file: Path) -> tuple[np.ndarray, list[str]]:
    values = col.tolist()
    for i, v in enumerate(values):
        if _is_null(v):
            raise DataError(f"{file}: row {i}: missing label")
    tokens = [label_token(v) for v in values]
    classes = sorted_classes(set(tokens))
    index = {c: k for k, c in enumerate(classes)}
    return np.array([index[t] for t in tokens], dtype=np.int64), classes


def _multi_labels(col: pd.Series, file: Path) -> tuple[np.ndarray, list[str]]:
    rows: list[list[str]] = []
    for i, v in enumerate(col.tolist()):
        if isinstance(v, str):
            items = [s for s in (p.strip() for p in v.split("|")) if s]
        elif isinstance(v, (list, tuple, np.ndarray)):
            items = [label_token(x) for x in v if not _is_null(x)]
        elif _is_null(v):
            items = []
        else:
            raise DataError(f"{file}: row {i}: 'labels' must be a list or a '|'-separated string")
        rows.append(items)
    classes = sorted_classes({t for r in rows for t in r})
    if not classes:
        raise DataError(f"{file}: 'labels' column has no labels at all")
    index = {c: k for k, c in enumerate(classes)}
    y = np.zeros((len(rows), len(classes)), dtype=np.float32)
    for i, r in enumerate(rows):
        y[i, [index[t] for t in r]] = 1.0
    return y, classes


def attribute_array(col: pd.Series) -> np.ndarray | None:
    """Numbers stay numeric, strings become codes in sorted order (missing = -1); nested values are skipped."""
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        return col.to_numpy()
    if pd.api.types.is_datetime64_any_dtype(col):
        return pd.to_datetime(col, utc=True).astype("datetime64[ns, UTC]").to_numpy(dtype="datetime64[ns]").astype(np.int64) / 1e9
    values = col.tolist()
    present = [v for v in values if not _is_null(v)]
    if any(isinstance(v, (list, tuple, dict, set, np.ndarray)) for v in present):
        return None
    if present and all(isinstance(v, Real) for v in present):
        return pd.to_numeric(col).to_numpy(dtype=np.float64)
    distinct = sorted({str(v) for v in present})
    index = {s: k for k, s in enumerate(distinct)}
    return np.array([-1 if _is_null(v) else index[str(v)] for v in values], dtype=np.int64)


def _load_image(file: Path, row: int, value: Any, size: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    if _is_null(value) or not str(value).strip():
        raise DataError(f"{file}: row {row}: empty image path")
    img_path = Path(str(value))
    if not img_path.is_absolute():
        img_path = file.parent / img_path
    try:
        with Image.open(img_path) as img:
            rgb = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    except (OSError, UnidentifiedImageError, ValueError) as err:
        raise DataError(f"{file}: row {row}: cannot read image {img_path} ({_one_line(err)})") from None
    return np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) / 255.0


def _tokens(text: Any) -> list[str]:
    return [] if _is_null(text) else _WORD.findall(str(text).lower())


def _group(users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable order by user id, the group boundaries, and each example's rank within its user."""
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    starts = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]])
    rank = np.empty(len(users), dtype=np.int64)
    rank[order] = np.arange(len(users)) - np.repeat(starts, np.diff(np.r_[starts, len(users)]))
    return order, starts, rank


def load_table(path: str, *, image_size: int = 28, seq_len: int = 80, vocab_size: int = 5000) -> Corpus:
    """Load a per-example table (``.jsonl``, ``.csv`` or ``.parquet``) into a per-user ``Corpus``.

    Columns: ``user_id`` (required); ``timestamp`` (number, or ISO date -> UTC epoch seconds;
    absent -> row order within the user); exactly one of ``text`` and ``path`` (image file,
    relative to the table's folder, read as RGB and resized to ``image_size``); ``label`` (one
    class, names sorted -> multiclass) or ``labels`` (list or ``a|b`` string -> multi-hot
    multilabel). Text is lower-cased ``\\w+`` words over a vocabulary of ``<pad>``, ``<unk>`` and
    the ``vocab_size - 2`` most frequent words (ties alphabetical): with labels, x is the first
    ``seq_len`` ids; without, rows are cut into ``seq_len + 1`` next-token windows (rows with
    fewer than two words give none). Every other scalar column becomes ``attrs[col]``.
    Rows in errors are counted from 0 in data order.
    """
    file = Path(path)
    frame = read_frame(path)
    cols = set(frame.columns)
    if "user_id" not in cols:
        raise DataError(f"{file}: missing required column 'user_id'")
    if ("text" in cols) == ("path" in cols):
        which = "both 'text' and 'path'" if "text" in cols else "neither 'text' nor 'path'"
        raise DataError(f"{file}: table has {which}; give exactly one")
    if "label" in cols and "labels" in cols:
        raise DataError(f"{file}: table has both 'label' and 'labels'; give one")
    is_text = "text" in cols
    label_col = "label" if "label" in cols else "labels" if "labels" in cols else None
    if not is_text and label_col is None:
        raise DataError(f"{file}: image rows need a 'label' or 'labels' column")
    if is_text and vocab_size < 3:
        raise DataError(f"{file}: vocab_size must be at least 3 (got {vocab_size})")

    raw_users = frame["user_id"].tolist()
    for i, u in enumerate(raw_users):
        if _is_null(u) or not str(u).strip():
            raise DataError(f"{file}: row {i}: missing user_id")
    user_of_row = np.array([label_token(u) for u in raw_users], dtype=object).astype(str)
    n_rows = len(frame)
    _, _, rank = _group(user_of_row)
    t_row = parse_times(frame["timestamp"], file) if "timestamp" in cols else rank.astype(np.float64)
    attrs_row = {c: a for c in frame.columns if c not in RESERVED and (a := attribute_array(frame[c])) is not None}

    y_row: np.ndarray | None = None
    num_classes = 0
    task: Task
    if label_col == "label":
        y_row, classes = _single_labels(frame["label"], file)
        num_classes, task = len(classes), "multiclass"
    elif label_col == "labels":
        y_row, classes = _multi_labels(frame["labels"], file)
        num_classes, task = len(classes), "multilabel"

    vocab: tuple[str, ...] | None = None
    src = np.arange(n_rows)  # the row each example comes from
    if is_text:
        tokens = [_tokens(v) for v in frame["text"].tolist()]
        counts = Counter(w for row in tokens for w in row)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 2]
        vocab = ("<pad>", "<unk>") + tuple(w for w, _ in top)
        index = {w: k for k, w in enumerate(vocab) if k >= 2}
        ids = [np.array([index.get(w, 1) for w in row], dtype=np.int64) for row in tokens]
        if y_row is not None:
            x = np.zeros((n_rows, seq_len), dtype=np.int64)
            for i, row_ids in enumerate(ids):
                x[i, : min(len(row_ids), seq_len)] = row_ids[:seq_len]
            y = y_row
        else:
            width = seq_len + 1
            wins: list[np.ndarray] = []
            rows: list[int] = []
            for i, row_ids in enumerate(ids):
                if len(row_ids) < 2:
                    continue
                n = -(-len(row_ids) // width)
                w = np.zeros(n * width, dtype=np.int64)
                w[: len(row_ids)] = row_ids
                wins.append(w.reshape(n, width))
                rows.extend([i] * n)
            if not wins:
                raise DataError(f"{file}: no row has the two words a next-token window needs")
            windows = np.concatenate(wins)
            x, y = np.ascontiguousarray(windows[:, :-1]), np.ascontiguousarray(windows[:, 1:])
            src = np.array(rows, dtype=np.int64)
            task, num_classes = "next-token", len(vocab)
        input_shape: tuple[int, ...] = (seq_len,)
    else:
        assert y_row is not None
        x = np.stack([_load_image(file, i, v, image_size) for i, v in enumerate(frame["path"].tolist())])
        y = y_row
        input_shape = (3, image_size, image_size)

    users_of_ex = user_of_row[src]
    order, starts, _ = _group(users_of_ex)
    ends = np.r_[starts[1:], len(order)]
    t_ex = t_row[src]
    attrs_ex = {c: a[src] for c, a in attrs_row.items()}
    users: dict[str, UserData] = {}
    for s, e in zip(starts, ends, strict=True):
        idx = order[s:e]
        users[str(users_of_ex[idx[0]])] = UserData(
            x=x[idx], y=y[idx], t=t_ex[idx], attrs={c: a[idx] for c, a in attrs_ex.items()}
        )
    return Corpus(
        name=file.stem,
        task=task,
        num_classes=num_classes,
        input_shape=input_shape,
        users=users,
        vocab=vocab,
        time="timestamps" if "timestamp" in cols else "row order",
    )
