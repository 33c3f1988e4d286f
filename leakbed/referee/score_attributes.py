"""Referee side of attribute inference and the joint model (seed 001 §6.1.3): top-1 accuracy of
each attribute and of the identity, single-task (STL) and multi-task (MTL), in the form of the
seed's Table 4, with chance levels (the most frequent attribute value; 1/|users| for identity). Kind ``attributes``.

Coverage: one row of labels per given update (``stl_id``, and per column ``stl_attr/<c>``, ``mtl_attr/<c>``,
``mtl_id/<c>``); a label kind has no ranking, so a given update without a row, or with a non-finite label in any of
them, gets a random guess in all of them, drawn uniformly by the referee: an identity from the users the chance
level counts (the users the referee holds: it hits with probability 1/|users|, the identity chance), an attribute
value from the values the truth takes for that column (it hits with 1/|values|, never above the majority chance).
Accuracies are over every given update.

Sets: the attribute columns are the referee's (the attack's params' rule over the attacker's knowledge:
``core.attack_sets.attribute_columns``), never the attack's ``columns``: a column it left out counts as uniform guesses
(exactly 1/|values| and 1/|users| in expectation), one the referee does not hold is ignored. The users, for the
identity and its chance 1/|users|, are the ones the referee holds (``ScoreContext.known_users``), not the names the
attack guessed (which once set the chance's denominator).
"""

from __future__ import annotations

import numpy as np

from leakbed.core.attack_sets import MAX_VALUES, attribute_columns
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import LABEL_NOTE, ClassCoverage, Coverage
from leakbed.referee.schemas import OutputsError

ATTR = "attr-"  # the sealed fact of a device's value of an attribute column (``client.user_facts``)


def column_metrics(r: dict[str, np.ndarray], c: str, owners: np.ndarray, t: np.ndarray) -> dict:
    """One attribute column the attack scored: top-1 accuracies alone and jointly, against the majority share."""
    _, counts = np.unique(t, return_counts=True)
    return {
        "values": int(len(np.unique(np.concatenate([t, np.asarray(r[f"values/{c}"], float)])))),
        "stl": float(np.mean(np.asarray(r[f"stl_attr/{c}"], float) == t)),
        "mtl": float(np.mean(np.asarray(r[f"mtl_attr/{c}"], float) == t)),
        "mtl_deanon": float(np.mean(r[f"mtl_id/{c}"] == owners)),
        "chance": float(counts.max() / len(t)),
    }


def chance_column(t: np.ndarray, n_users: int) -> dict:
    """A column the attack left out: every guess a uniform one, so exactly 1/|values| of the attribute and 1/|users| of
    the identity in expectation (an expectation, not a draw)."""
    values, counts = np.unique(t, return_counts=True)
    return {
        "values": int(len(values)),
        "stl": 1.0 / len(values),
        "mtl": 1.0 / len(values),
        "mtl_deanon": 1.0 / n_users,
        "chance": float(counts.max() / len(t)),
    }


def attribute_metrics(per: dict[str, dict], stl_id: np.ndarray, owners: np.ndarray, n_users: int) -> dict:
    """The means over every attribute column the referee holds (``per``), and identity alone."""
    return {
        "stl_deanon": float(np.mean(stl_id == owners)),
        "deanon_chance": 1.0 / n_users,
        "stl_attr": float(np.mean([p["stl"] for p in per.values()])),
        "mtl_attr": float(np.mean([p["mtl"] for p in per.values()])),
        "mtl_deanon": float(np.mean([p["mtl_deanon"] for p in per.values()])),
        "attr_chance": float(np.mean([p["chance"] for p in per.values()])),
        "per_attribute": per,
    }


def held_columns(ctx: ScoreContext) -> list[str]:
    """The attribute columns the referee scores: the attack's params' rule over the attacker's knowledge
    (``core.attack_sets.attribute_columns``: the named columns, else every per-user one); without a knowledge file,
    every column sealed for every given update."""
    knowledge = ctx.knowledge
    if knowledge is not None:
        named = [str(c) for c in ctx.params.get("columns", ())]
        return attribute_columns(knowledge.prior, named, int(ctx.params.get("max_values", MAX_VALUES)))
    records = [r for r in ctx.truth.records() if r["update_id"] in set(ctx.given.tolist())]
    common = set.intersection(*(set(r) for r in records)) if records else set()
    return sorted(k.removeprefix(ATTR) for k in common if k.startswith(ATTR))


def score(ctx: ScoreContext) -> dict:
    out, referee = ctx.outputs, ctx.truth
    held = ClassCoverage(held_columns(ctx), out["columns"])
    columns = held.classes[: held.n_kept].tolist()
    for c in columns:
        for key in (f"values/{c}", f"stl_attr/{c}", f"mtl_attr/{c}", f"mtl_id/{c}"):
            if key not in out:
                raise OutputsError(f"outputs: column {c!r} needs {key!r}; it is missing")
    rows = ["stl_id", *(f"{k}/{c}" for c in columns for k in ("stl_attr", "mtl_attr", "mtl_id"))]
    cov = Coverage.of(ctx, "attributes", out["ids"], *(out[k] for k in rows))
    owners = referee.truth_for(cov.given)
    truth = {c: np.asarray(referee.field_for(cov.given, f"{ATTR}{c}"), float) for c in held.classes.tolist()}
    users = np.asarray(ctx.known_users, str)
    r = {"stl_id": cov.labels(out["stl_id"], users)}
    per: dict[str, dict] = {}
    for c in held.classes.tolist():
        if c not in columns:
            per[c] = chance_column(truth[c], len(users))
            continue
        values = np.unique(truth[c])
        r |= {
            f"values/{c}": out[f"values/{c}"],
            f"stl_attr/{c}": cov.labels(np.asarray(out[f"stl_attr/{c}"], float), values),
            f"mtl_attr/{c}": cov.labels(np.asarray(out[f"mtl_attr/{c}"], float), values),
            f"mtl_id/{c}": cov.labels(out[f"mtl_id/{c}"], users),
        }
        per[c] = column_metrics(r, c, owners, truth[c])
    m = attribute_metrics(per, r["stl_id"], owners, len(users)) | cov.report() | held.report()
    pct = lambda v: round(100 * v, 1)  # noqa: E731 - the seed reports percentages
    rows = [
        [c, p["values"], pct(p["stl"]), "-", pct(p["mtl"]), pct(p["mtl_deanon"]), pct(p["chance"])]
        for c, p in m["per_attribute"].items()
    ]
    rows.append(["-", "-", "-", pct(m["stl_deanon"]), "-", "-", pct(m["deanon_chance"])])
    m["tables"] = {
        "Attribute inference and deanonymization, top-1 % (seed 001 Table 4 form)": {
            "header": ["Attribute", "# Attrs", "STL AttrInf", "STL Deanon", "MTL AttrInf", "MTL Deanon", "chance"],
            "rows": rows,
        }
    }
    m["notes"] = [
        f"Attribute inference (seed 001 §6.1.3): mean top-1 {m['stl_attr']:.3f} alone, {m['mtl_attr']:.3f} jointly "
        f"(chance {m['attr_chance']:.3f}); deanonymization {m['stl_deanon']:.3f} alone, {m['mtl_deanon']:.3f} jointly "
        f"(chance {m['deanon_chance']:.3f}). Seed (PIPA): 85-99% attributes, 87.6% → 90-92% identity with MTL.",
        cov.note(LABEL_NOTE),
        *held.notes("attribute columns"),
    ]
    return m
