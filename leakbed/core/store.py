"""The on-disk update store of a run: one small file per round and kind, written as rounds arrive.

Nothing is held in memory across rounds, so a long run's footprint does not grow with rounds;
the store also lets any result be re-scored later. Kinds: ``global`` (the round's global model),
``shadow`` (the attacker's own updates, labelled by the identities it knows), ``anon`` (the
anonymous updates, keyed by opaque update ids), ``pred`` (an attacker's scores).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np


class StoreReader:
    """A store's read side: what an attack may call (``core.inputs.InputsView``), with no write method."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def read_global(self, rnd: int) -> dict[str, np.ndarray]:
        """The global model the devices of round ``rnd`` received (the server's model before that round's updates)."""
        with np.load(self.root / "global" / f"r{rnd:06d}.npz") as z:
            return {k.replace("/", "."): z[k] for k in z.files}

    def read_anon_full(self, rnd: int) -> dict[str, dict[str, np.ndarray]]:
        """``{update_id: {parameter: Δw}}`` for one round."""
        out: dict[str, dict[str, np.ndarray]] = {}
        for f in sorted((self.root / "anon_full").glob(f"r{rnd:06d}-*.npz")):
            with np.load(f) as z:
                ids = [str(i) for i in z["ids"]]
                for key in z.files:
                    if key == "ids":
                        continue
                    i, param = key.split("/", 1)
                    out.setdefault(ids[int(i)], {})[param.replace("/", ".")] = z[key]
        return out

    def _read_kind(self, kind: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
        files = sorted((self.root / kind).glob("r*.npz"))
        parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        for f in files:
            with np.load(f) as z:
                for k in keys:
                    parts[k].append(z[k])
        return {k: np.concatenate(v) if v else np.empty(0) for k, v in parts.items()}

    def read_shadow(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All shadow updates: (vectors, labels, rounds)."""
        files = sorted((self.root / "shadow").glob("r*.npz"))
        vecs, labels, rounds = [], [], []
        for f in files:
            with np.load(f) as z:
                vecs.append(z["vectors"])
                labels.append(z["labels"])
                rounds.append(np.full(len(z["labels"]), int(f.stem[1:])))
        if not vecs:
            return np.empty((0, 0), np.float32), np.empty(0, str), np.empty(0, int)
        return np.concatenate(vecs), np.concatenate(labels), np.concatenate(rounds)

    def read_anon(self) -> dict[str, np.ndarray]:
        """All anonymous updates: ids, vectors, num_examples, round."""
        return self._read_kind("anon", ("ids", "vectors", "num_examples", "round"))

    def read_anon_meta(self, names: tuple[str, ...] = ("norm", "sparsity", "nbytes")) -> dict[str, np.ndarray]:
        """Each anonymous update's metadata, in ``read_anon`` order; NaN where a file has none."""
        parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
        for f in sorted((self.root / "anon").glob("r*.npz")):
            with np.load(f) as z:
                n = len(z["ids"])
                for k in names:
                    parts[k].append(z[f"meta_{k}"].astype(np.float64) if f"meta_{k}" in z.files else np.full(n, np.nan))
        return {k: np.concatenate(v) if v else np.empty(0) for k, v in parts.items()}

    def shadow_rounds(self) -> list[int]:
        """The rounds with shadow updates."""
        return sorted(int(f.stem[1:]) for f in (self.root / "shadow").glob("r*.npz"))

    def read_config(self, rnd: int) -> dict[str, Any]:
        """The training config the server sent with round ``rnd`` (epochs or steps, batch size, lr, optimizer...)."""
        import json

        config: dict[str, Any] = json.loads((self.root / "config" / f"r{rnd:06d}.json").read_text(encoding="utf-8"))
        return config

    def anon_ids(self) -> np.ndarray:
        """The ids of every anonymous update filed so far (without reading their vectors)."""
        parts = []
        for f in sorted((self.root / "anon").glob("r*.npz")):
            with np.load(f) as z:
                parts.append(z["ids"])
        return np.concatenate(parts) if parts else np.empty(0, str)

    def global_rounds(self) -> list[int]:
        """The rounds whose global model has arrived."""
        return sorted(int(f.stem[1:]) for f in (self.root / "global").glob("r*.npz"))

    def anon_full_rounds(self) -> list[int]:
        """The rounds with full anonymous updates (``read_anon_full``)."""
        return sorted({int(f.stem[1:7]) for f in (self.root / "anon_full").glob("r*.npz")})


class UpdateStore(StoreReader):
    """Append-only folder of ``.npz`` files; writes are atomic (temp file + rename)."""

    def _write(self, kind: str, name: str, arrays: dict[str, np.ndarray]) -> Path:
        folder = self.root / kind
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.npz"
        tmp = folder / f".{name}.{uuid.uuid4().hex}.tmp.npz"
        named: dict[str, Any] = arrays  # numpy's stub would read a key of **arrays as its allow_pickle flag
        np.savez(tmp, **named)
        os.replace(tmp, path)
        return path

    def write_global(self, rnd: int, arrays: dict[str, np.ndarray]) -> Path:
        return self._write("global", f"r{rnd:06d}", {k.replace(".", "/"): v for k, v in arrays.items()})

    def write_shadow(self, rnd: int, labels: list[str], vectors: np.ndarray) -> Path:
        return self._write("shadow", f"r{rnd:06d}", {"labels": np.asarray(labels), "vectors": vectors})

    def write_anon(
        self,
        rnd: int,
        batch: str,
        ids: list[str],
        vectors: np.ndarray,
        num_examples: np.ndarray,
        meta: dict[str, np.ndarray] | None = None,
    ) -> Path:
        """``meta``: what each report carries besides its weights (``norm``, ``sparsity``, ``nbytes``)."""
        return self._write(
            "anon",
            f"r{rnd:06d}-{batch}",
            {
                "ids": np.asarray(ids),
                "vectors": vectors,
                "num_examples": num_examples,
                "round": np.full(len(ids), rnd),
                **{f"meta_{k}": np.asarray(v) for k, v in (meta or {}).items()},
            },
        )

    def write_anon_full(self, rnd: int, batch: str, ids: list[str], arrays: list[dict[str, np.ndarray]]) -> Path:
        """Full Δw of each anonymous update, for attacks that read every parameter."""
        flat = {"ids": np.asarray(ids)}
        for i, per_param in enumerate(arrays):
            flat.update({f"{i}/{k.replace('.', '/')}": v for k, v in per_param.items()})
        return self._write("anon_full", f"r{rnd:06d}-{batch}", flat)

    def write_result(self, attack: str, arrays: dict[str, np.ndarray]) -> Path:
        """An attack's outputs (its ``predict``: scores, predictions, figures' data) for the referee."""
        return self._write("result", attack, arrays)

    def read_result(self, attack: str) -> dict[str, np.ndarray]:
        with np.load(self.root / "result" / f"{attack}.npz") as z:
            return {k: z[k] for k in z.files}

    def has_result(self, attack: str) -> bool:
        return (self.root / "result" / f"{attack}.npz").exists()

    def write_config(self, rnd: int, train_config: dict[str, Any]) -> Path:
        """The training config the server sent with round ``rnd`` (JSON)."""
        import json

        folder = self.root / "config"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"r{rnd:06d}.json"
        tmp = folder / f".r{rnd:06d}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(train_config), encoding="utf-8")
        os.replace(tmp, path)
        return path
