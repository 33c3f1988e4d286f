"""Coverage: every scorer leakbed ships scores over all the updates the attack was given.

An attack that returned only its confident rows used to be scored on those rows alone, which raised its AP (a
re-identification attack dropping its least confident half went from 80 to 100 AP, top-1 from 75 to 92). Now the
outputs are joined with the ids of every anonymous update its fit was given (``ScoreContext.given``, written by the
pool beside the outputs), here, once, for every kind:

- a row whose id was not given is ignored (``rows_extra``); a later row of an id already seen is ignored
  (``rows_duplicate``): the first row of an id is the one scored;
- a given id without a row, or whose row holds a non-finite number in any per-update array the kind reads, counts
  as a random ranking (``rows_missing``): the referee draws its values itself, from its own generator
  (``fill_rng``: the experiment seed, a constant per kind, the CRC-32 of the attack's name), never from anything
  the attack controls: uniform scores over the range of the attack's finite scores of that array (so they rank
  anywhere among the real rows: AP and top-k of those rows are chance in expectation), or, for label kinds, a
  uniform label over the kind's value set (see each kind's docstring);
- every result carries ``coverage`` (finite given rows / given), ``rows_missing``, ``rows_extra``,
  ``rows_duplicate`` and ``n_updates`` (the given updates), and the metrics are computed over all given updates.

Rows that are not one per update (aggregates, attacked samples, pairs) are joined the same way on their own key;
each kind's module says how.

Classes (``ClassCoverage``) are joined the same way: the columns an attack names (users, node pseudonyms, attribute
columns) with the classes the referee holds for the prior (the users the attacker's knowledge lists, written by
trusted code: ``ScoreContext.known_users``; the kind's own sets otherwise). A named class the referee does not hold
is ignored (``classes_extra``), a later column of the same class too (``classes_duplicate``); a held class without a
column (``classes_missing``) counts at chance: in a ranking its AP is the exact chance AP and it takes a uniformly
random place in every row (``core.reid_metrics``), in a label kind its accuracy is a uniform guess's. No average,
denominator or chance figure is ever taken over a set the attack chose.

The guarantee, exactly: an omitted part (row, class, pair, sample) is scored as the referee's random guess, in
expectation the kind's chance on that part, and nothing the attack kept scores differently for it except through
that guess. So omission buys nothing a complete output could not: a subset of an honest output scores above the
output itself only by erasing parts the output got worse than chance, which the attack cannot tell without the truth
(``tests/referee/test_subsets.py`` draws subsets of rows, classes and both for every kind).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from leakbed.core.store import UpdateStore
    from leakbed.referee.context import ScoreContext

NOTE = "missing or non-finite rows count as a random ranking (uniform scores drawn by the referee)"
LABEL_NOTE = "missing or non-finite rows count as a random guess (uniform labels drawn by the referee)"


def fill_rng(seed: int, kind: str, attack: str) -> np.random.Generator:
    """The referee's own draws for the rows an attack left out: seeded by the experiment, the kind and the attack."""
    return np.random.default_rng([int(seed), zlib.crc32(kind.encode()), zlib.crc32(attack.encode())])


def finite_rows(n: int, arrays: Iterable[np.ndarray]) -> np.ndarray:
    """Per row: every number of every per-row array (first axis ``n``) is finite; text and booleans always are."""
    ok = np.ones(n, bool)
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "fc" and len(a) == n:
            ok &= np.isfinite(a.reshape(n, int(np.prod(a.shape[1:])))).all(axis=1)
    return ok


def store_rounds(store: UpdateStore) -> dict[str, int]:
    """Each anonymous update's (release) round as the trusted store filed it, without reading its vector."""
    out: dict[str, int] = {}
    for f in sorted((store.root / "anon").glob("r*.npz")):
        with np.load(f, allow_pickle=False) as z:
            out.update(zip((str(i) for i in z["ids"]), (int(r) for r in z["round"]), strict=True))
    return out


def random_ranks(values: np.ndarray, bad: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``values`` with its ``bad`` cells replaced by the referee's draws: each gets an i.i.d. uniform rank in its
    column (the first axis runs over rows), i.e. the attack's own finite score at a uniform random quantile of that
    column (a column without one: uniform on [0, 1)). A drawn row thus sits at a random place in every column's
    ranking (AP, AUC) and, drawn independently of its owner, names a class at chance (top-k)."""
    out = np.asarray(values, np.float64).copy()
    if not np.any(bad):
        return out
    flat = out.reshape(len(out), int(np.prod(out.shape[1:])))  # a view: (rows, columns)
    holes = np.asarray(bad, bool).reshape(flat.shape)
    for j in np.flatnonzero(holes.any(axis=0)):
        col, hole = flat[:, j], holes[:, j]
        real = np.sort(col[~hole])
        u = rng.random(int(hole.sum()))
        col[hole] = np.interp(u * (len(real) - 1), np.arange(len(real)), real) if len(real) else u
    return out


class ClassCoverage:
    """An attack's class names (the columns of its score matrices) joined with the classes the referee holds.

    ``classes`` are the referee's classes in scoring order: those the attack scored, in its own column order (so ties
    break as before), then those it left out; ``column[c]`` is the attack's column of ``classes[c]`` (-1: none)."""

    def __init__(self, held: Iterable[str], named: np.ndarray) -> None:
        held = list(dict.fromkeys(str(c) for c in held))
        wanted = set(held)
        first: dict[str, int] = {}
        self.classes_extra = self.classes_duplicate = 0
        for j, c in enumerate(str(c) for c in np.asarray(named).ravel()):
            if c in first:
                self.classes_duplicate += 1
            elif c not in wanted:
                self.classes_extra += 1
                first[c] = -1  # later columns of the same stray class are duplicates
            else:
                first[c] = j
        kept = [(c, j) for c, j in first.items() if j >= 0]
        missing = [c for c in held if c not in first]
        self.classes = np.asarray([c for c, _ in kept] + missing, dtype=str)
        self.column = np.asarray([j for _, j in kept] + [-1] * len(missing), np.int64)
        self.n_kept = len(kept)

    @property
    def classes_missing(self) -> int:
        return int(len(self.classes) - self.n_kept)

    def kept(self, values: np.ndarray) -> np.ndarray:
        """The attack's columns (last axis) of the classes the referee holds, in ``classes`` order."""
        values = np.asarray(values)
        return values[..., self.column[: self.n_kept]]

    def widen(self, kept: np.ndarray) -> np.ndarray:
        """``kept`` (last axis: the scored classes) with a NaN column for each class the attack left out: what
        ``core.reid_metrics`` counts at chance."""
        kept = np.asarray(kept, np.float64)
        out = np.full((*kept.shape[:-1], len(self.classes)), np.nan)
        out[..., : self.n_kept] = kept
        return out

    def report(self) -> dict:
        """The fields a result carries beside its rows' coverage."""
        return {
            "classes_missing": self.classes_missing,
            "classes_extra": int(self.classes_extra),
            "classes_duplicate": int(self.classes_duplicate),
            "n_classes": int(len(self.classes)),
        }

    def notes(self, what: str = "users") -> list[str]:
        """One report line on which of the referee's classes the attack scored, when it did not score exactly those."""
        r = self.report()
        if not (r["classes_missing"] or r["classes_extra"] or r["classes_duplicate"]):
            return []
        return [
            f"Classes: the attack scored {self.n_kept} of the {r['n_classes']} {what} the referee holds ({r['classes_missing']} "
            f"left out count at chance; {r['classes_extra']} it named that the referee does not hold and "
            f"{r['classes_duplicate']} repeated ignored)."
        ]


class Coverage:
    """An attack's rows joined with the given ids: ``row[g]`` is the output row of given update ``g`` (-1: none),
    ``ok[g]`` whether that row is there and finite."""

    def __init__(
        self,
        given: np.ndarray,
        ids: np.ndarray,
        *,
        rng: np.random.Generator,
        finite: np.ndarray | None = None,
        store: UpdateStore | None = None,
    ) -> None:
        self.given = np.asarray(list(dict.fromkeys(str(g) for g in np.asarray(given).ravel())), dtype=str)
        wanted = set(self.given.tolist())
        first: dict[str, int] = {}
        self.rows_duplicate = self.rows_extra = 0
        for k, i in enumerate(str(i) for i in np.asarray(ids).ravel()):
            if i in first:
                self.rows_duplicate += 1
            elif i not in wanted:
                self.rows_extra += 1
                first[i] = -1  # later rows of the same stray id are duplicates
            else:
                first[i] = k
        self.row = np.asarray([first.get(g, -1) for g in self.given.tolist()], np.int64)
        self.ok = self.row >= 0
        if finite is not None and len(finite):
            self.ok &= np.asarray(finite, bool)[np.clip(self.row, 0, None)]
        self.rng = rng
        self._store = store
        self._rounds: dict[str, int] | None = None

    @classmethod
    def of(
        cls, ctx: ScoreContext, kind: str, ids: np.ndarray, *per_row: np.ndarray, shared: Iterable[np.ndarray] = ()
    ) -> Coverage:
        """The coverage of ``ids`` (one per output row) over ``ctx.given``; a row counts as finite when every
        ``per_row`` array is finite in it, and no row does when an array every row's score uses (``shared``: a
        network head, the users' embeddings) is not finite."""
        n = len(ids)
        finite = finite_rows(n, per_row)
        if not all(np.isfinite(np.asarray(s, float)).all() for s in shared):
            finite[:] = False
        return cls(ctx.given, ids, rng=fill_rng(ctx.cfg.seed, kind, ctx.attack), finite=finite, store=ctx.store)

    def __len__(self) -> int:
        return len(self.given)

    @property
    def rows_missing(self) -> int:
        return int((~self.ok).sum())

    @property
    def filled(self) -> np.ndarray:
        """Per given update: its row is the referee's draw (missing or non-finite)."""
        return ~self.ok

    def take(self, values: np.ndarray, fill: object = 0) -> np.ndarray:
        """``values`` (one row per output row) in given order; ``fill`` where a given update has no usable row."""
        values = np.asarray(values)
        out = np.full((len(self.given), *values.shape[1:]), fill, dtype=values.dtype)
        out[self.ok] = values[self.row[self.ok]]
        return out

    def randomize(self, aligned: np.ndarray) -> np.ndarray:
        """Rows of ``aligned`` (given order) that are not ok, and any non-finite number left, replaced by the
        referee's draws (``random_ranks``)."""
        out = np.asarray(aligned, np.float64)
        bad = ~np.isfinite(out.reshape(len(out), int(np.prod(out.shape[1:]))))
        bad[~self.ok] = True
        return random_ranks(out, bad.reshape(out.shape), self.rng)

    def scores(self, values: np.ndarray) -> np.ndarray:
        """An attack's per-update scores over all given updates, missing or non-finite rows random."""
        return self.randomize(self.take(np.asarray(values, np.float64), np.nan))

    def labels(self, values: np.ndarray, choices: np.ndarray) -> np.ndarray:
        """An attack's per-update labels over all given updates; a missing row gets a label drawn uniformly from
        ``choices`` (the kind's value set)."""
        values = np.asarray(values)
        choices = np.asarray(choices)
        dtype = np.result_type(values.dtype, choices.dtype) if len(choices) else values.dtype
        out = np.zeros(len(self.given), dtype)
        out[self.ok] = values[self.row[self.ok]]
        missing = int((~self.ok).sum())
        if missing and len(choices):
            out[~self.ok] = choices[self.rng.integers(0, len(choices), missing)]
        return out

    def rounds(self, fallback: np.ndarray | None = None) -> np.ndarray:
        """Each given update's round: as the store filed it, else the attack's row, else -1."""
        if self._rounds is None:
            self._rounds = store_rounds(self._store) if self._store is not None else {}
        theirs = self.take(np.asarray(fallback, np.int64), -1) if fallback is not None else np.full(len(self.given), -1)
        return np.asarray([self._rounds.get(g, int(t)) for g, t in zip(self.given.tolist(), theirs, strict=True)], np.int64)

    def report(self) -> dict:
        """The fields every result carries beside its score."""
        n = len(self.given)
        return {
            "coverage": float(self.ok.sum() / n) if n else 1.0,
            "rows_missing": self.rows_missing,
            "rows_extra": int(self.rows_extra),
            "rows_duplicate": int(self.rows_duplicate),
            "n_updates": int(n),
        }

    def note(self, rule: str = NOTE, what: str = "updates") -> str:
        """One report line: the coverage and how the gaps were scored."""
        r = self.report()
        return (
            f"Coverage {100 * r['coverage']:.1f}% of the {r['n_updates']} {what} the attack was given "
            f"({r['rows_missing']} missing or non-finite, {r['rows_extra']} extra and {r['rows_duplicate']} duplicate "
            f"rows ignored): {rule}."
        )
