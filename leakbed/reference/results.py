"""Results pages from committed run summaries: every generated table of ``docs/`` is written here, never by hand.

A summary (``docs/results/data/<name>.json``) holds the numbers of one finished run or sweep and the command that
produced it; a page marks where a table goes with ``<!-- generated: <name> -->`` ... ``<!-- /generated -->``
(``<!-- generated: a,b,c -->``: one table with a row group per summary, for the kinds that have rows).

    python -m leakbed.reference.results summarize run RUN_DIR --name NAME --command "leakbed run ..."
    python -m leakbed.reference.results summarize sweep SWEEP_DIR --name NAME --command "leakbed sweep ..."
    python -m leakbed.reference.results summarize suite RUN_DIR --name NAME --command "leakbed run ..."
    python -m leakbed.reference.results summarize property RUN_DIR --name NAME --label LABEL --command "leakbed run ..."
    python -m leakbed.reference.results summarize participant RUN_DIR --name NAME [--label LABEL] --command "..."
    python -m leakbed.reference.results summarize membership RUN_DIR --name NAME --label LABEL --command "leakbed run ..."
    python -m leakbed.reference.results summarize pixel-sweep SWEEP_DIR --name NAME --command "leakbed sweep ..."
    python -m leakbed.reference.results summarize metadata RUN_OR_SWEEP_DIR --name NAME --label LABEL --command "..."
    python -m leakbed.reference.results summarize audit SWEEP_OR_RUN_DIR --name NAME --command "leakbed sweep ..."
    python -m leakbed.reference.audit_coverage --seeds 1000 --runs 20   # the audit's coverage (kind audit-coverage)
    python -m leakbed.reference.results write          # rewrite every generated table of docs/ and README.md

``tests/docs/test_results.py`` re-renders every table and fails when a page and its summary disagree.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from leakbed.core.tables import markdown_table
from leakbed.reference.audit_results import audit_table, coverage_table, summarize_audit

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "data"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
REGION = re.compile(r"(<!-- generated: (?P<name>[\w.,-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)
ATTACKERS = {"mlp": "MLP", "svm": "SVM", "knn": "kNN"}


def summarize_run(run_dir: Path, command: str) -> dict:
    """The closed-world numbers of a finished ``leakbed run``: per prior and attacker AP, chance AP, top-1/5."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    priors = [p for p in metrics if isinstance(metrics[p], dict) and p not in ("attack_sandbox", "privacy_audit")]
    table = {p: {a: {k: metrics[p][a][k] for k in ("ap", "chance_ap", "x_chance", "top1", "top5")}
                 for a in ATTACKERS if a in metrics[p]} for p in priors}  # fmt: skip
    users = json.loads((run_dir / priors[0] / "metrics.json").read_text())["users"]
    return {"kind": "run", "command": command, "priors": table, "users": users}


def summarize_sweep(sweep_dir: Path, command: str) -> dict:
    """A finished ``leakbed sweep``'s privacy-utility rows (``tradeoff.json``)."""
    keep = ("point", "defense", "prior", "utility", "utility_norm", "epsilon", "mlp_x_chance", "svm_x_chance", "knn_x_chance")
    rows = json.loads((sweep_dir / "tradeoff.json").read_text())
    return {"kind": "sweep", "command": command, "rows": [{k: r.get(k) for k in keep} for r in rows]}


PIXEL_FIELDS = ("recovered", "recovered_chance", "psnr", "psnr_chance", "label_accuracy", "label_chance", "x_chance")


def summarize_pixel_sweep(sweep_dir: Path, command: str) -> dict:
    """A finished ``leakbed sweep`` against pixel reconstruction attacks: per point and suite attack that recovers
    images, images recovered and mean PSNR beside the attacker's prior images, labels, × chance; utility and ε."""
    rows = []
    for r in json.loads((sweep_dir / "tradeoff.json").read_text()):
        suite = json.loads((sweep_dir / r["point"] / r["prior"] / "metrics.json").read_text())["suite"]
        point = {k: r.get(k) for k in ("point", "utility", "utility_norm", "epsilon")}
        for attack, scores in suite.items():
            if isinstance(scores, dict) and "recovered" in scores:
                rows.append({**point, "attack": attack, **{k: scores.get(k) for k in PIXEL_FIELDS}})
    return {"kind": "pixel-sweep", "command": command, "rows": rows}


SUITE_FIELDS = {  # what the further-attacks table shows of each attack's scores
    "open-world": ("ap", "x_chance", "unseen_recall", "match_ap"),
    "matching": ("ap", "prior_ap"),
    "cross-modal": ("ap", "text_only_ap", "encoder"),
    "profile": ("precision_at_k", "k", "chance"),
}


def summarize_suite(run_dir: Path, command: str) -> dict:
    """Seed 001's further re-identification attacks of a finished run (``leakbed/configs/suite-reid.toml`` and its kin),
    per prior: open world, matching, cross-modal, profile, attributes."""
    priors: dict[str, dict] = {}
    users = 0
    for path in sorted(run_dir.glob("*/metrics.json"), key=lambda f: (f.parent.name != "random", f.parent.name)):
        metrics = json.loads(path.read_text())
        suite, users = metrics["suite"], metrics["users"]
        at = suite["attributes"]
        priors[path.parent.name] = {name: {k: suite[name][k] for k in keys} for name, keys in SUITE_FIELDS.items()} | {
            "attributes": {
                "per_attribute": {a: {k: v[k] for k in ("stl", "mtl", "chance")} for a, v in at["per_attribute"].items()},
                **{k: at[k] for k in ("stl_deanon", "mtl_deanon", "deanon_chance")},
            },
        }
    return {"kind": "suite", "command": command, "users": users, "priors": priors}


def _x_chance(m: dict | None, key: str = "x_chance") -> float | None:
    v = (m or {}).get(key)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _metadata_row(metrics: dict, label: str) -> dict:
    meta, link = metrics["suite"]["metadata"], metrics["suite"]["linkage"]
    weights = meta.get("weights", {})
    best = max(weights, key=lambda a: weights[a]["ap"]) if weights else None
    one, inter, views = link.get("one_example", {}), link.get("intersection", {}), link.get("views", {})
    return {
        "label": label, "prior": metrics["prior"], "users": metrics["users"], "updates": metrics["pool"]["tapped"],
        "metadata": _x_chance(meta), "best": best,
        "weights": _x_chance(weights.get(best)) if best else None,
        "fused": _x_chance(meta.get("fused", {}).get(best)) if best else None,
        "linkage": {v: _x_chance(views.get(v)) for v in ("meta", "w", "both")},
        "ari": _x_chance(link, "ari"),
        "one_example": {k: _x_chance(one.get(k)) for k in ("alone", "linked")},
        "intersection": {k: _x_chance(inter.get(k)) for k in ("alone", "linked", "perfect_linking")},
        "utility": metrics["utility"][str(metrics["rounds"])]["utility"],
    }  # fmt: skip


def summarize_metadata(folder: Path, command: str, label: str) -> dict:
    """The metadata and linkage attacks of a finished run (``leakbed/configs/metadata.toml`` and its kin), per prior, or of
    every point of a finished sweep (``sweep.json`` beside them): the metadata-only, best weight attacker and fused
    re-identification, linkage pair AP by view and the grouping's ARI, one-example and intersection
    re-identification, all × chance; the global model's final utility."""
    sweep = folder / "sweep.json"
    runs = [(folder / p, p) for p in json.loads(sweep.read_text())["points"]] if sweep.is_file() else [(folder, label)]
    rows = []
    for run, name in runs:
        found = sorted(run.glob("*/metrics.json"), key=lambda f: (f.parent.name != "random", f.parent.name))
        for path in found:
            rows.append(_metadata_row(json.loads(path.read_text()), name + (f", {path.parent.name}" if len(found) > 1 else "")))
    return {"kind": "metadata", "command": command, "rows": rows}


def _auc(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 6)


def summarize_property(run_dir: Path, command: str, label: str) -> dict:
    """The passive property attack (single updates) or the aggregate one (SecAgg+ sums) of a finished run: ROC AUC
    with the seed's classifier (random forest) and with the other one, whole-dataset AUC, AUC by the batch's
    property share."""
    rows = []
    for path in sorted(run_dir.glob("*/metrics.json")):
        suite = json.loads(path.read_text())["suite"]
        if "property" in suite:
            pr = suite["property"]
            (table,) = pr["tables"].values()
            rows.append({
                "label": label, "kind": "updates", "setting": pr["setting"], "observed": pr["updates"],
                "auc": _auc(pr["auc"]), "auc_other": _auc(pr["auc_other"]), "other": pr["classifier_other"],
                "dataset_auc": _auc(pr["dataset_auc"]), "dataset_auc_other": _auc(pr["dataset_auc_other"]),
                "by_share": [{"share": r[0], "updates": r[1], "auc": r[2], "auc_other": r[3]} for r in table["rows"]],
            })  # fmt: skip
        if "aggregate-property" in suite:
            ag = suite["aggregate-property"]
            rows.append({
                "label": label, "kind": "aggregates", "setting": f"{ag['secure_aggregation']} aggregates",
                "observed": ag["aggregates"], "with_property": ag["with_property"],
                "auc": _auc(ag["auc"]), "auc_other": _auc(ag["auc_other"]), "other": ag["classifier_other"],
            })  # fmt: skip
    return {"kind": "property", "command": command, "rows": rows}


def summarize_participant(run_dir: Path, command: str, label: str | None = None) -> dict:
    """The adversarial participant's active property attack of a finished run (``leakbed/configs/active-property.toml``):
    its α, the rounds it observed and how many held the property, ROC AUC and mean scores with and without.
    ``label`` names the run in its table (a column shown only when some summary of the table has one)."""
    rows = []
    for path in sorted(run_dir.glob("*/metrics.json")):
        for name, a in json.loads(path.read_text())["participant_attacks"].items():
            keep = ("alpha", "observations", "positive_rounds", "auc", "mean_score_with", "mean_score_without")
            rows.append({"attack": name, **{k: a.get(k) for k in keep}})
    return {"kind": "participant", "command": command, "rows": rows} | ({"label": label} if label else {})


def summarize_membership(run_dir: Path, command: str, label: str) -> dict:
    """The embedding-layer membership attack of a finished run (``leakbed/configs/membership.toml``): records per update,
    precision and recall on as many hold-out records as members."""
    rows = []
    for path in sorted(run_dir.glob("*/metrics.json")):
        m = json.loads(path.read_text())["suite"]["membership"]
        keep = ("batch_records", "updates", "members_tested", "precision", "recall", "vocab_size", "vocab_per_update")
        rows.append({"label": label, **{k: m.get(k) for k in keep}})
    return {"kind": "membership", "command": command, "rows": rows}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def run_table(summary: dict) -> str:
    """The Table-3-form table the report prints: AP % (× chance), top-1 %, top-5 % per prior."""
    priors = list(summary["priors"])
    header = ["attacker", *(f"{p} {what}" for p in priors for what in ("AP", "top-1", "top-5"))]
    first = summary["priors"][priors[0]]
    rows = []
    for key, label in ATTACKERS.items():
        if key not in first:
            continue
        cells = [label]
        for p in priors:
            m = summary["priors"][p][key]
            cells += [f"{_pct(m['ap'])} ({m['x_chance']:.0f}×)", _pct(m["top1"]), _pct(m["top5"])]
        rows.append(cells)
    rows.append(["Chance", *(cell for p in priors for cell in _chance(summary, p))])
    return markdown_table(header, rows)


def _chance(summary: dict, prior: str) -> list[str]:
    """Chance AP (exact, on the same updates), and top-1 / top-5 of a random guess among the users."""
    any_attacker = next(iter(summary["priors"][prior].values()))
    users = summary["users"]
    return [f"{_pct(any_attacker['chance_ap'])} (1×)", _pct(1 / users), _pct(min(5, users) / users)]


def sweep_table(summary: dict) -> str:
    """One row per sweep point: × chance per attacker, utility normalised to the undefended run, ε."""
    header = ["point", "MLP × chance", "SVM × chance", "kNN × chance", "utility (÷ undefended)", "ε"]
    rows = []
    for r in summary["rows"]:
        eps = "—" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        xs = [f"{r[f'{a}_x_chance']:.1f}" if r[f"{a}_x_chance"] is not None else "—" for a in ATTACKERS]
        rows.append([r["point"], *xs, f"{r['utility']:.3f} ({r['utility_norm']:.2f})", eps])
    return markdown_table(header, rows)


# The seeds' own figures for the suite's rows, where leakbed reproduces the attack in kind (seed 001: PIPA;
# seed 003 Table 8: closed-world matching AP over datasets and splits).
SUITE_SEED = {
    "open-world": "3–14× (001 Fig. 6)",
    "open-world-match": "1.5–1.8× chance (001 Fig. 6)",
    "matching": "91.2–99.5 (003 Table 8)",
    "cross-modal": "76.3 (001 §6.1.1)",
    "profile": "qualitative (001 Fig. 5)",
    "attributes": "85.2–98.5 (001 Table 4)",
    "deanon": "87.6 / 90–92 (001 Table 4)",
}


def _open_world(m: dict) -> str:
    ow = m["open-world"]
    return f"{_pct(ow['ap'])} ({ow['x_chance']:.1f}×), {ow['unseen_recall']:.2f}"


def _attributes(m: dict) -> str:
    per = m["attributes"]["per_attribute"].values()
    return ", ".join(f"{100 * v['stl']:.0f} / {100 * v['mtl']:.0f} ({100 * v['chance']:.0f})" for v in per)


def _deanon(m: dict) -> str:
    at = m["attributes"]
    return f"{_pct(at['stl_deanon'])} / {_pct(at['mtl_deanon'])} ({_pct(at['deanon_chance'])})"


def suite_table(summary: dict) -> str:
    """The further attacks in rows, one column per prior, the seeds' figures last."""
    priors = summary["priors"]
    first = next(iter(priors.values()))
    rows: list[tuple[str, str, Callable[[dict], str]]] = [
        ("open world, ½ of non-holdout users seen: re-id AP (× chance), unseen recall", "open-world", _open_world),
        ("open world: Siamese matching AP (chance 50)", "open-world-match", lambda m: _pct(m["open-world"]["match_ap"])),
        (
            "matching: anonymous pairs AP / anonymous–prior AP (chance 50)",
            "matching",
            lambda m: f"{_pct(m['matching']['ap'])} / {_pct(m['matching']['prior_ap'])}",
        ),
        (
            f"cross-modal ({first['cross-modal']['encoder']}): AP all / text-only users (chance 50)",
            "cross-modal",
            lambda m: f"{_pct(m['cross-modal']['ap'])} / {_pct(m['cross-modal']['text_only_ap'])}",
        ),
        (
            f"profile: precision@{first['profile']['k']} (chance)",
            "profile",
            lambda m: f"{m['profile']['precision_at_k']:.2f} ({m['profile']['chance']:.2f})",
        ),
        (f"attributes STL / MTL top-1 % (chance): {', '.join(first['attributes']['per_attribute'])}", "attributes", _attributes),
        ("deanonymization STL / MTL top-1 % (chance)", "deanon", _deanon),
    ]
    cells = [[label, *(cell(priors[p]) for p in priors), SUITE_SEED[seed]] for label, seed, cell in rows]
    return markdown_table(["attack", *priors, "seed"], cells)


def _fx(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}×"


def metadata_table(summaries: list[dict]) -> str:
    """One row per run (and prior): metadata, weights (best attacker), fused; linkage × chance by view, ARI;
    one-example and intersection re-identification; utility."""
    header = ["run", "metadata", "weights (best)", "fused", "linkage meta / Δw / both", "ARI", "1-example alone / linked",
              "intersection alone / linked / perfect", "utility"]  # fmt: skip
    rows = []
    for summary in summaries:
        for r in summary["rows"]:
            link, one, inter = r["linkage"], r["one_example"], r["intersection"]
            rows.append([
                f"{r['label']} ({r['users']} users, {r['updates']} updates)",
                _fx(r["metadata"]),
                f"{_fx(r['weights'])} ({r['best']})",
                _fx(r["fused"]),
                " / ".join(_fx(link[v]) for v in ("meta", "w", "both")),
                "—" if r["ari"] is None else f"{r['ari']:.2f}",
                f"{_fx(one['alone'])} / {_fx(one['linked'])}",
                " / ".join(_fx(inter[k]) for k in ("alone", "linked", "perfect_linking")),
                f"{r['utility']:.3f}",
            ])  # fmt: skip
    return markdown_table(header, rows)


# The seed's figures for passive property inference (seed 002: single-batch AUC on LFW, Table 7.3; by the batch's
# property share, Figure 7.4; on multi-party aggregates, Figure 7.7a).
PROPERTY_SEED = {
    "updates": "0.91–1.0 (002 Table 7.3, LFW); rises with the share (Fig. 7.4)",
    "aggregates": "≈0.8 at 12 parties (002 Fig. 7.7a, LFW)",
}


def _f2(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def property_table(summaries: list[dict]) -> str:
    """One row per run: ROC AUC with the seed's random forest and with logistic regression (chance 0.5)."""
    header = ["run", "observed", "AUC: forest / logistic", "whole dataset: forest / logistic",
              "by property share (0,⅛] / (⅛,¼] / (¼,½] / (½,1]: forest; logistic", "seed"]  # fmt: skip
    rows = []
    for summary in summaries:
        for r in summary["rows"]:
            share = "—"
            if r["kind"] == "updates":
                forest = " / ".join(b["auc"] for b in r["by_share"])
                other = " / ".join(b["auc_other"] for b in r["by_share"])
                share = f"{forest}; {other}"
                whole = f"{_f2(r['dataset_auc'])} / {_f2(r['dataset_auc_other'])}"
                observed = f"{r['observed']} updates"
            else:
                whole = "—"
                observed = f"{r['observed']} aggregates, {r['with_property']} with a holder"
            rows.append([f"{r['label']}: {r['setting']}", observed, f"{_f2(r['auc'])} / {_f2(r['auc_other'])}", whole, share,
                         PROPERTY_SEED[r["kind"]]])  # fmt: skip
    return markdown_table(header, rows)


def participant_table(summaries: list[dict]) -> str:
    """One row per run: the adversary's α (1 = honest training, a passive attacker), what it observed, its AUC;
    the run's label first when the summaries have one."""
    labelled = any("label" in s for s in summaries)
    header = ["α (main-task weight)", "rounds observed (with the property)", "ROC AUC", "mean score with / without", "seed"]
    seed = "AUC rises with the property loss's weight (002 Fig. 7.6a, FaceScrub)"
    rows = []
    for summary in summaries:
        for r in summary["rows"]:
            scores = f"{_f2(r['mean_score_with'])} / {_f2(r['mean_score_without'])}"
            row = [f"{r['alpha']:g}", f"{r['observations']} ({r['positive_rounds']})", _f2(r["auc"]), scores, seed]
            rows.append([summary.get("label", "—"), *row] if labelled else row)
    return markdown_table(["run", *header] if labelled else header, rows)


def _precision(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def membership_table(summaries: list[dict]) -> str:
    """One row per run: records per update, the distinct tokens an update reveals out of the vocabulary, precision
    (recall) on a balanced query set; the seed's Table 7.2."""
    header = ["run", "records per update", "updates", "tokens per update / vocabulary", "precision", "recall",
              "seed 002 Table 7.2 (Yelp-health)"]  # fmt: skip
    seed = "batch 32 / 64 / 128 / 256 / 512: 0.92 / 0.84 / 0.75 / 0.66 / 0.62"
    rows = [
        [r["label"], str(r["batch_records"]), str(r["updates"]), f"{r['vocab_per_update']:.0f} / {r['vocab_size']}",
         _precision(r["precision"]), _precision(r["recall"]), seed]
        for summary in summaries
        for r in summary["rows"]
    ]  # fmt: skip
    return markdown_table(header, rows)


def _pixel(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f}"


def pixel_sweep_table(summary: dict) -> str:
    """One row per sweep point and pixel attack: images recovered and PSNR beside prior images (the chance level),
    labels, × chance (add-one), utility, ε."""
    header = ["point", "attack", "utility (÷ undefended)", "ε", "images recovered % (prior images)",
              "mean PSNR dB (prior images)", "labels % (chance)", "× chance"]  # fmt: skip
    rows = []
    for r in summary["rows"]:
        rows.append([
            r["point"],
            r["attack"],
            f"{r['utility']:.3f} ({r['utility_norm']:.2f})",
            "—" if r["epsilon"] is None else f"{r['epsilon']:.3g}",
            f"{_pixel(r['recovered'])} ({_pixel(r['recovered_chance'])})",
            f"{r['psnr']:.1f} ({r['psnr_chance']:.1f})",
            f"{_pixel(r['label_accuracy'])} ({_pixel(r['label_chance'])})",
            f"{r['x_chance']:.3g}",
        ])  # fmt: skip
    return markdown_table(header, rows)


RENDER: dict[str, Callable[[dict], str]] = {
    "run": run_table,
    "sweep": sweep_table,
    "suite": suite_table,
    "pixel-sweep": pixel_sweep_table,
    "audit-coverage": coverage_table,
}
RENDER_MANY: dict[str, Callable[[list[dict]], str]] = {
    "metadata": metadata_table,
    "property": property_table,
    "participant": participant_table,
    "membership": membership_table,
    "audit": audit_table,
}
SUMMARIZE: dict[str, Callable[[Path, str], dict]] = {
    "run": summarize_run,
    "sweep": summarize_sweep,
    "suite": summarize_suite,
    "pixel-sweep": summarize_pixel_sweep,
    "audit": summarize_audit,
}
SUMMARIZE_LABELLED: dict[str, Callable[[Path, str, str], dict]] = {  # kinds whose rows name their run
    "metadata": summarize_metadata,
    "property": summarize_property,
    "membership": summarize_membership,
}


def render(names: str) -> str:
    """The generated block for the summaries ``names`` (comma-separated): their commands, then their table."""
    summaries = [json.loads((DATA / f"{name}.json").read_text()) for name in names.split(",")]
    kinds = {s["kind"] for s in summaries}
    if len(kinds) != 1 or (len(summaries) > 1 and kinds.isdisjoint(RENDER_MANY)):
        raise ValueError(f"generated: {names}: one summary, or several of one kind with rows ({sorted(RENDER_MANY)})")
    (kind,) = kinds
    table = RENDER_MANY[kind](summaries) if kind in RENDER_MANY else RENDER[kind](summaries[0])
    files = ", ".join(f"`docs/results/data/{name}.json`" for name in names.split(","))
    source = f"Generated from {files}, the summar{'ies' if len(summaries) > 1 else 'y'} of:"
    commands = "\n".join(s["command"] for s in summaries)
    return f"{source}\n\n```bash\n{commands}\n```\n\n{table}\n"


def rendered(text: str) -> str:
    """``text`` with every generated region re-rendered from its summary."""
    return REGION.sub(lambda m: m.group(1) + render(m["name"]) + m.group(4), text)


def write() -> list[Path]:
    changed = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = rendered(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leakbed.reference.results", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("summarize", help="write docs/results/data/NAME.json from a finished run or sweep folder")
    s.add_argument("kind", choices=[*SUMMARIZE, *SUMMARIZE_LABELLED, "participant"])
    s.add_argument("folder", type=Path)
    s.add_argument("--name", required=True)
    s.add_argument("--command", required=True, help="the command that produced the folder")
    s.add_argument("--label", help="metadata, property, membership, participant: the run's name in its table")
    sub.add_parser("write", help="rewrite every generated table of the docs from its summary")
    args = p.parse_args(argv)
    try:
        return _act(args)
    except (OSError, KeyError, ValueError) as err:  # a folder that is not a finished run of that kind, a bad region
        print(f"python -m leakbed.reference.results: {type(err).__name__}: {err}", file=sys.stderr)
        return 2


def _summary(args: argparse.Namespace) -> dict:
    if not args.folder.is_dir():
        raise ValueError(f"{args.folder}: no such folder")
    if args.kind in SUMMARIZE_LABELLED:
        summary = SUMMARIZE_LABELLED[args.kind](args.folder, args.command, args.label or args.folder.name)
    elif args.kind == "participant":
        summary = summarize_participant(args.folder, args.command, args.label)
    else:
        summary = SUMMARIZE[args.kind](args.folder, args.command)
    if not summary.get("rows", summary.get("priors")):
        raise ValueError(f"{args.folder}: no finished {args.kind} results in it")
    return summary


def _act(args: argparse.Namespace) -> int:
    if args.action == "summarize":
        summary = _summary(args)
        DATA.mkdir(parents=True, exist_ok=True)
        (DATA / f"{args.name}.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"written: docs/results/data/{args.name}.json")
    else:
        for page in write():
            print(f"rewritten: {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
