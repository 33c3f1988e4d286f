"""Referee side of attribute inference and the joint model (seed 001 §6.1.3): top-1 accuracy of
each attribute and of the identity, single-task (STL) and multi-task (MTL), in the form of the
seed's Table 4, with chance levels (the most frequent attribute value; 1/|users| for identity). Kind ``attributes``.

Coverage: one row of labels per given update (``stl_id``, and per column ``stl_attr/<c>``, ``mtl_attr/<c>``,
``mtl_id/<c>``); a label kind has no ranking, so a given update without a row, or with a non-finite label in any of
them, gets a random guess in all of them, drawn uniformly by the referee: an identity from the users the chance
level counts (those the attack names and the true owners: it hits with probability 1/|users|, the identity chance),
an attribute value from the values the truth takes for that column (it hits with 1/|values|, never above the
majority chance). Accuracies are over every given update.
"""

from __future__ import annotations

import numpy as np

from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import LABEL_NOTE, Coverage
from leakbed.referee.schemas import OutputsError


def attribute_metrics(r: dict[str, np.ndarray], owners: np.ndarray, truth: dict[str, np.ndarray], n_users: int) -> dict:
    per: dict[str, dict] = {}
    for c in [str(c) for c in r["columns"]]:
        t = np.asarray(truth[c], float)
        _, counts = np.unique(t, return_counts=True)
        per[c] = {
            "values": int(len(np.unique(np.concatenate([t, np.asarray(r[f"values/{c}"], float)])))),
            "stl": float(np.mean(np.asarray(r[f"stl_attr/{c}"], float) == t)),
            "mtl": float(np.mean(np.asarray(r[f"mtl_attr/{c}"], float) == t)),
            "mtl_deanon": float(np.mean(r[f"mtl_id/{c}"] == owners)),
            "chance": float(counts.max() / len(t)),
        }
    stl_deanon = float(np.mean(r["stl_id"] == owners))
    return {
        "stl_deanon": stl_deanon,
        "deanon_chance": 1.0 / n_users,
        "stl_attr": float(np.mean([p["stl"] for p in per.values()])),
        "mtl_attr": float(np.mean([p["mtl"] for p in per.values()])),
        "mtl_deanon": float(np.mean([p["mtl_deanon"] for p in per.values()])),
        "attr_chance": float(np.mean([p["chance"] for p in per.values()])),
        "per_attribute": per,
    }


def score(ctx: ScoreContext) -> dict:
    out, referee = ctx.outputs, ctx.truth
    columns = [str(c) for c in out["columns"]]
    for c in columns:
        for key in (f"values/{c}", f"stl_attr/{c}", f"mtl_attr/{c}", f"mtl_id/{c}"):
            if key not in out:
                raise OutputsError(f"outputs: column {c!r} needs {key!r}; it is missing")
    rows = ["stl_id", *(f"{k}/{c}" for c in columns for k in ("stl_attr", "mtl_attr", "mtl_id"))]
    cov = Coverage.of(ctx, "attributes", out["ids"], *(out[k] for k in rows))
    owners = referee.truth_for(cov.given)
    truth = {c: np.asarray(referee.field_for(cov.given, f"attr-{c}"), float) for c in columns}
    used = out["stl_id"][cov.row[cov.ok]]
    users = np.unique(np.concatenate([np.asarray(used, str), owners]))
    r = {"columns": out["columns"], "stl_id": cov.labels(out["stl_id"], users)}
    for c in columns:
        values = np.unique(truth[c])
        r |= {
            f"values/{c}": out[f"values/{c}"],
            f"stl_attr/{c}": cov.labels(np.asarray(out[f"stl_attr/{c}"], float), values),
            f"mtl_attr/{c}": cov.labels(np.asarray(out[f"mtl_attr/{c}"], float), values),
            f"mtl_id/{c}": cov.labels(out[f"mtl_id/{c}"], users),
        }
    n_users = len(np.unique(np.concatenate([r["stl_id"], owners])))
    m = attribute_metrics(r, owners, truth, n_users) | cov.report()
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
    ]
    return m
