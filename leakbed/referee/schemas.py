"""The outputs each of leakbed's scorer kinds expects, and the check the referee runs before a kind's scorer.

An attack scored by kind K hands back, as its outputs, the arrays ``OUTPUTS[K]`` names: each an ``ArraySpec``
(``workers.hostile``: allowed dtype kinds, a shape whose str entries are symbolic dims that must agree across the
arrays of one outputs, whether it may be absent). A name holding ``*`` is a pattern (``values/*``): any number of
arrays may match it, each checked against its spec (so it is always optional). Arrays the schema does not name are
not read. The pool checks bounds and dtypes when it files the outputs; ``check_outputs`` is the referee's own check
against the kind, so a mismatch is the attack's score failing in one line (``OutputsError``), never a traceback.

Symbols: ``n`` anonymous updates scored, ``k`` classes (known users), ``d`` an embedding's width, ``u`` users known
by text, ``c`` attribute columns, ``a`` observed aggregates, ``r`` attacked updates, ``s`` reconstructed samples (over
all attacked updates), ``p`` update pairs (n·(n−1)/2), ``q`` node pseudonyms, ``m`` the attacker's shadow updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

import numpy as np

from leakbed.core.linkage_views import VARIANTS
from leakbed.workers.hostile import ArraySpec

Schema = Mapping[str, ArraySpec]

IDS = ArraySpec("U", ("n",))  # the opaque ids of the anonymous updates the rows are about
ROUNDS = ArraySpec("iu", ("n",), optional=True)  # the referee takes each update's round from the store


def _spec(kinds: str, *shape: int | str | None, optional: bool = False) -> ArraySpec:
    return ArraySpec(kinds, tuple(shape), optional)


RANKING = {"ids": IDS, "rounds": ROUNDS, "classes": _spec("U", "k"), "scores": _spec("f", "n", "k")}
SIAMESE_HEAD = {"head_w": _spec("f", "d"), "head_b": _spec("f", 1)}

OUTPUTS: dict[str, Schema] = {
    "reid": RANKING,
    "metadata": {
        "ids": IDS,
        "rounds": ROUNDS,
        "classes": _spec("U", "k"),
        "meta": _spec("f", "n", "k"),
        "count_only": _spec("f", "n", "k"),
        "weights_*": _spec("f", "n", "k", optional=True),
        "fused_*": _spec("f", "n", "k", optional=True),
        "rule": _spec("U"),
        "scale": _spec("f"),
        "norm_slope": _spec("f"),
        "sigma": _spec("f", optional=True),
    },
    "matching": {
        "ids": IDS,
        "rounds": ROUNDS,
        "emb": _spec("f", "n", "d"),
        "shadow_emb": _spec("f", "m", "d"),
        "shadow_labels": _spec("U", "m"),
        **SIAMESE_HEAD,
    },
    "cross-modal": {
        "ids": IDS,
        "rounds": ROUNDS,
        "emb": _spec("f", "n", "d"),
        "users": _spec("U", "u"),
        "user_emb": _spec("f", "u", "d"),
        "paired": _spec("U", None),
        "encoder": _spec("U"),
        **SIAMESE_HEAD,
    },
    "open-world": {
        "ids": IDS,
        "rounds": ROUNDS,
        "seen": _spec("U", None),
        "holdout": _spec("U", None),
        "classes": _spec("U", "k", optional=True),  # absent with no seen user (then so is scores)
        "scores": _spec("f", "n", "k", optional=True),
        "emb": _spec("f", "n", "d"),
        **SIAMESE_HEAD,
    },
    "profile": {"ids": IDS, "rounds": ROUNDS, "scores": _spec("f", "n"), "target_class": _spec("iu")},
    "attributes": {
        "ids": IDS,
        "rounds": ROUNDS,
        "columns": _spec("U", "c"),
        "stl_id": _spec("U", "n"),
        "values/*": _spec("biuf", None, optional=True),
        "stl_attr/*": _spec("biuf", "n", optional=True),
        "mtl_attr/*": _spec("biuf", "n", optional=True),
        "mtl_id/*": _spec("U", "n", optional=True),
    },
    "property": {
        "ids": IDS,
        "rounds": ROUNDS,
        "scores": _spec("f", "n"),
        "scores_other": _spec("f", "n", optional=True),
        "other": _spec("U", optional=True),
        "aux_count": _spec("iu", optional=True),
    },
    "aggregate-property": {
        "rounds": _spec("iu", "a"),
        "scores": _spec("f", "a"),
        "scores_other": _spec("f", "a", optional=True),
        "other": _spec("U", optional=True),
        "members": _spec("U", "a", optional=True),  # not read: the referee groups the given updates by round itself
    },
    "membership": {"ids": IDS, "rounds": _spec("iu", "n"), "vocab": _spec("u", "n", None), "vocab_size": _spec("iu")},
    "reconstruction": {
        "ids": _spec("U", "r"),
        "rounds": _spec("iu", "r"),
        "counts": _spec("iu", "r"),
        "steps": _spec("iu", "r"),
        "batch_size": _spec("iu", "r"),
        "seconds": _spec("fiu", "r", optional=True),
        "recon": _spec("f", "s", None),
        "probs": _spec("f", "s"),
        "labels": _spec("iu", "s", optional=True),
        "skipped": _spec("iu"),
        "space": _spec("U"),
        "device": _spec("U", optional=True),
    },
    "linkage": {
        "ids": IDS,
        "rounds": ROUNDS,
        "cannot_link": _spec("b"),
        "groups": _spec("iu"),
        **{f"pairs_{v}": _spec("f", "p") for v in VARIANTS},
        **{f"labels_{v}": _spec("iu", "n") for v in VARIANTS},
        "single_attacker": _spec("U", optional=True),
        "single_classes": _spec("U", "k", optional=True),
        "single_raw": _spec("f", "n", "k", optional=True),
        "single_linked": _spec("f", "n", "k", optional=True),
        "pseudonyms": _spec("U", "q", optional=True),
        "inter_candidates": _spec("fiub", "n", "q", optional=True),
        "inter_single": _spec("f", "n", "q", optional=True),
        "inter_linked": _spec("f", "n", "q", optional=True),
    },
    "redteam": {"found": _spec("U")},
}

_KIND_WORDS = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex", "U": "str"}


class OutputsError(ValueError):
    """An attack's outputs are not what its scorer kind expects (one line, naming the array)."""


def describe(spec: ArraySpec) -> str:
    """``float (n, k)``: the kinds and the shape a spec allows, as a refusal names them."""
    kinds = spec.kinds
    if set(kinds) >= set("iu"):
        kinds = kinds.replace("i", "").replace("u", "") + "I"
    words = {**_KIND_WORDS, "I": "int"}
    what = "|".join(words.get(k, k) for k in kinds)
    if spec.shape is None:
        return f"{what} (any shape)"
    dims = ["?" if d is None else str(d) for d in spec.shape]
    return f"{what} ({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _matches(arrays: Mapping[str, np.ndarray], name: str) -> list[str]:
    if "*" in name:
        return sorted(k for k in arrays if fnmatchcase(k, name))
    return [name] if name in arrays else []


def check_outputs(arrays: Mapping[str, np.ndarray], schema: Schema) -> None:
    """Raise ``OutputsError`` (one line) unless every array ``schema`` names is there (or optional) with an allowed
    dtype kind (any, when it is empty: ``np.asarray([])`` is float) and its shape, symbolic dims agreeing across
    arrays (``n`` is one size wherever it appears)."""
    bound: dict[str, tuple[int, str]] = {}
    for name, spec in schema.items():
        keys = _matches(arrays, name)
        if not keys and not spec.optional:
            raise OutputsError(f"outputs: {name!r} must be {describe(spec)}; it is missing")
        for key in keys:
            a = np.asarray(arrays[key])
            got = f"got {a.dtype} {tuple(a.shape)}"
            if a.dtype.hasobject or (a.dtype.kind not in spec.kinds and a.size):  # an empty array holds no value
                raise OutputsError(f"outputs: {key!r} must be {describe(spec)}; {got}")
            if spec.shape is None:
                continue
            if a.ndim != len(spec.shape):
                raise OutputsError(f"outputs: {key!r} must be {describe(spec)}; {got}")
            for axis, (size, want) in enumerate(zip(a.shape, spec.shape, strict=True)):
                if isinstance(want, int) and size != want:
                    raise OutputsError(f"outputs: {key!r} must be {describe(spec)}; {got}")
                if isinstance(want, str):
                    first = bound.setdefault(want, (size, f"{key!r}"))
                    if first[0] != size:
                        raise OutputsError(
                            f"outputs: {key!r} must be {describe(spec)} with {want} = {first[0]} as in {first[1]}; "
                            f"{got} (axis {axis})"
                        )
