"""Flower Datasets with a ``NaturalIdPartitioner``: one partition per natural user id.

This is the path for hub data sets that carry a real owner column (e.g. ``flwrlabs/femnist``
partitioned by ``writer_id``) and for local Parquet/CSV/JSON files in the same shape.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.data.errors import DataError
from leakbed.core.data.table import attribute_array, label_token, parse_times, sorted_classes

_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
IMAGE_COLUMNS = ("image", "img", "pixels", "x")
LABEL_COLUMNS = ("character", "label")


def _local_files(p: Path) -> tuple[str, list[str]]:
    """The ``datasets`` builder name and the data files for a local file or folder."""
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _BUILDERS)
    if not files:
        raise DataError(f"{p}: no .parquet, .csv, .json or .jsonl files found")
    builders = {_BUILDERS.get(f.suffix.lower()) for f in files}
    if None in builders:
        raise DataError(f"{p}: unknown extension {p.suffix or '(none)'!r}; use .parquet, .csv, .json or .jsonl")
    if len(builders) != 1:
        raise DataError(f"{p}: mixes file formats {sorted(b for b in builders if b)}; keep one")
    return builders.pop(), [str(f) for f in files]  # type: ignore[return-value]


def _quiet_telemetry() -> None:
    """flwr-datasets posts usage events from a worker thread; offline that thread can hold exit for 60 s.

    Off unless the user opts in with FLWR_TELEMETRY_ENABLED=1 (only this package's copy is touched).
    """
    try:
        from flwr_datasets.common import telemetry
    except ImportError:  # pragma: no cover - layout of other versions
        return
    if hasattr(telemetry, "FLWR_TELEMETRY_ENABLED"):
        telemetry.FLWR_TELEMETRY_ENABLED = os.environ.get("FLWR_TELEMETRY_ENABLED", "0")


def _reason(err: BaseException) -> str:
    """An exception as one short line for a DataError message."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def _to_array(value: Any, where: str) -> tuple[np.ndarray, bool]:
    """One image as float (C, H, W) in [0, 1] and whether it was grayscale."""
    from PIL import Image

    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        try:
            if value.get("bytes"):
                value = Image.open(io.BytesIO(value["bytes"]))
            elif value.get("path"):
                value = Image.open(value["path"])
            else:
                raise DataError(f"{where}: image struct has neither bytes nor path")
        except OSError as err:
            raise DataError(f"{where}: cannot decode image ({err})") from None
    if isinstance(value, bytes):
        try:
            value = Image.open(io.BytesIO(value))
        except OSError as err:
            raise DataError(f"{where}: cannot decode image ({err})") from None
    if isinstance(value, Image.Image):
        gray = value.mode in ("1", "L", "LA", "I", "I;16", "F")
        arr = np.asarray(value.convert("L" if gray else "RGB"), dtype=np.float32) / 255.0
        return (arr[None] if gray else arr.transpose(2, 0, 1)), gray
    try:
        arr = np.asarray(value)
        if not np.issubdtype(arr.dtype, np.number):
            raise ValueError
    except (ValueError, TypeError):
        raise DataError(f"{where}: image value is not an image, bytes or numeric array") from None
    integer = np.issubdtype(arr.dtype, np.integer)
    arr = arr.astype(np.float32)
    if arr.ndim == 1:
        side = math.isqrt(arr.size)
        if side * side != arr.size:
            raise DataError(f"{where}: flat pixel list of {arr.size} values is not a square image")
        arr = arr.reshape(1, side, side)
    elif arr.ndim == 2:
        arr = arr[None]
    elif arr.ndim == 3 and arr.shape[-1] in (1, 3) and arr.shape[0] not in (1, 3):
        arr = arr.transpose(2, 0, 1)
    elif not (arr.ndim == 3 and arr.shape[0] in (1, 3)):
        raise DataError(f"{where}: pixel array of shape {arr.shape} is not an image")
    if integer or (arr.size and float(arr.max()) > 1.0):
        arr = arr / 255.0
    return arr, arr.shape[0] == 1


def _resize(arr: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize channel by channel in float (no 8-bit round trip)."""
    from PIL import Image

    if arr.shape[1:] == (size, size):
        return arr
    return np.stack([np.asarray(Image.fromarray(c, mode="F").resize((size, size), Image.Resampling.BILINEAR)) for c in arr])


def load_flwr_datasets(path: str, *, partition_by: str, image_size: int = 28) -> Corpus:
    """Load a Flower Datasets ``FederatedDataset`` split by ``NaturalIdPartitioner(partition_by)``.

    ``path`` is a local ``.parquet``/``.csv``/``.json(l)`` file or folder, or a hub name
    (needs network; offline it raises ``DataError``). Partitions become users keyed by their
    natural id, rows in file order (no shuffling). The image column (a ``datasets.Image``,
    ``{"bytes", "path"}`` struct, raw bytes, or a ``pixels``/``x`` array) becomes float32
    (n, C, S, S) in [0, 1]: one channel when every image is grayscale, else RGB. Hub FEMNIST
    draws dark ink on white, unlike the black background the models expect, so a grayscale
    corpus whose mean pixel is above 0.5 is inverted as a whole (one decision for the corpus,
    so users stay comparable). ``character`` or ``label`` gives the class (``ClassLabel`` ids
    kept; other integers kept, K = max + 1; strings coded in sorted order). A ``timestamp``
    column gives ``t`` (else row index in the partition); other scalar columns become attrs.
    """
    p = Path(path)
    local = p.exists()
    if not local and (p.suffix.lower() in _BUILDERS or path.startswith((".", "/", "~"))):
        raise DataError(f"{p}: no such file or folder")
    _quiet_telemetry()
    from flwr_datasets import FederatedDataset
    from flwr_datasets.partitioner import NaturalIdPartitioner

    partitioner = NaturalIdPartitioner(partition_by=partition_by)
    if not local:
        fds = FederatedDataset(dataset=path, partitioners={"train": partitioner}, shuffle=False)
        return _convert(fds, path, name=path, partition_by=partition_by, image_size=image_size, local=False)
    builder, files = _local_files(p)
    # A throwaway Arrow cache: the user's local data is not copied into ~/.cache for good.
    with tempfile.TemporaryDirectory(prefix="leakbed-hf-", ignore_cleanup_errors=True) as cache:
        fds = FederatedDataset(
            dataset=builder, data_files=files, cache_dir=cache, partitioners={"train": partitioner}, shuffle=False
        )
        return _convert(fds, str(p), name=p.stem, partition_by=partition_by, image_size=image_size, local=True)


def _convert(fds: Any, where: str, *, name: str, partition_by: str, image_size: int, local: bool) -> Corpus:
    """Every partition of ``fds``'s train split as a user, converted while the Arrow files exist."""
    try:
        split = fds.load_split("train")
    except Exception as err:  # datasets and the hub raise many unrelated types
        if local:
            raise DataError(f"{where}: cannot load with flwr-datasets ({_reason(err)})") from None
        raise DataError(f"cannot load {where} from the hub (offline?) ({_reason(err)})") from None
    columns = list(split.column_names)
    if partition_by not in columns:
        raise DataError(f"{where}: no column {partition_by!r} to partition by (columns: {', '.join(columns)})")
    if len(split) == 0:
        raise DataError(f"{where}: no rows")

    from datasets import Image as ImageFeature

    features = split.features
    image_col = next((c for c in columns if isinstance(features[c], ImageFeature)), None)
    image_col = image_col or next((c for c in IMAGE_COLUMNS if c in columns), None)
    if image_col is None:
        raise DataError(f"{where}: no image column (a datasets.Image or one named {', '.join(IMAGE_COLUMNS)})")
    label_col = next((c for c in LABEL_COLUMNS if c in columns), None)
    if label_col is None:
        raise DataError(f"{where}: no label column ({' or '.join(LABEL_COLUMNS)})")
    attr_cols = [c for c in columns if c not in (partition_by, image_col, label_col, "timestamp")]

    try:
        fds.load_partition(0, "train")  # assigns the split to the partitioner, which builds the id map
    except (TypeError, ValueError, KeyError) as err:  # e.g. missing ids that cannot be sorted
        raise DataError(f"{where}: cannot partition by {partition_by!r} ({_reason(err)})") from None
    id_map = fds.partitioners["train"].partition_id_to_natural_id
    per_user: dict[str, dict[str, Any]] = {}
    for pid in range(fds.partitioners["train"].num_partitions):
        part = fds.load_partition(pid, "train")
        uid = label_token(id_map[pid])
        if uid in per_user:
            raise DataError(f"{where}: natural ids {uid!r} collide after conversion to text")
        imgs = [_to_array(v, f"{where}: {partition_by}={uid} row {i}") for i, v in enumerate(part[image_col])]
        frame = part.remove_columns([image_col]).to_pandas()
        per_user[uid] = {
            "x": [a for a, _ in imgs],
            "gray": all(g for _, g in imgs),
            "y": frame[label_col].tolist(),
            "t": parse_times(frame["timestamp"].reset_index(drop=True), Path(where))
            if "timestamp" in frame
            else np.arange(len(frame), dtype=np.float64),
            "attrs": frame[attr_cols],
        }

    gray = all(u["gray"] for u in per_user.values())
    for u in per_user.values():
        xs = [_resize(a, image_size) for a in u["x"]]
        xs = [a if gray or a.shape[0] == 3 else np.repeat(a, 3, axis=0) for a in xs]
        u["x"] = np.stack(xs).astype(np.float32)
    if gray and float(np.mean([u["x"].mean() for u in per_user.values()])) > 0.5:
        for u in per_user.values():
            u["x"] = 1.0 - u["x"]  # white-background scans (hub FEMNIST) -> ink on black

    y_all, num_classes = _labels(features[label_col], [u["y"] for u in per_user.values()], where)
    attrs_all = pd.concat([u["attrs"] for u in per_user.values()], ignore_index=True)
    attr_arrays = {c: a for c in attr_cols if (a := attribute_array(attrs_all[c])) is not None}
    users: dict[str, UserData] = {}
    start = 0
    bounds: dict[str, tuple[int, int]] = {}
    for uid, u in per_user.items():
        bounds[uid] = (start, start + len(u["x"]))
        start += len(u["x"])
    for uid in sorted(per_user):
        s, e = bounds[uid]
        u = per_user[uid]
        users[uid] = UserData(x=u["x"], y=y_all[s:e], t=u["t"], attrs={c: a[s:e] for c, a in attr_arrays.items()})
    channels = 1 if gray else 3
    return Corpus(
        name=name,
        task="multiclass",
        num_classes=num_classes,
        input_shape=(channels, image_size, image_size),
        users=users,
        time="timestamps" if "timestamp" in columns else "row order",
    )


def _labels(feature: Any, parts: list[list[Any]], where: str) -> tuple[np.ndarray, int]:
    """Class ids for all rows in user order, and the class count."""
    from datasets import ClassLabel

    values = [v for part in parts for v in part]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        raise DataError(f"{where}: missing label")
    if isinstance(feature, ClassLabel):
        return np.asarray(values, dtype=np.int64), int(feature.num_classes)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        y = np.asarray(values, dtype=np.int64)
        if y.size and y.min() < 0:
            raise DataError(f"{where}: negative integer labels")
        return y, int(y.max()) + 1 if y.size else 0
    tokens = [label_token(v) for v in values]
    classes = sorted_classes(set(tokens))
    index = {c: k for k, c in enumerate(classes)}
    return np.array([index[t] for t in tokens], dtype=np.int64), len(classes)
