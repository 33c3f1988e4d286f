"""Hostile plugin text and plugin-scored numbers: attacks whose own scorers (and declarations) try to forge leakbed's
outputs, and to pass their numbers off as the referee's.

- ``hostile-forged-notes``: its scorer's notes and tables forge a ``## Verdict (leakbed)`` section, a table, remote
  images, a ``javascript:`` link, HTML and terminal escapes; its declared notes do the same; it names figures that
  are remote or outside the run; its exports are named after other attacks (``knn``, ``metadata``), a path
  (``../x``) and a Prometheus label breaker (quotes, a newline, braces) with perfect scores.
- ``hostile-plugin-reid``: a closed-world attacker (family ``reid``) scored by its own scorer, which says AP 1.0,
  top-1 1.0, 100× chance: on the old code it sat in the headline table with no mark.
- ``hostile-missing-field``: the same, its scorer returning AP alone (no top-1, top-5, chance): on the old code the
  report failed on the missing key and the run exited 1 with no report.md for any attack.
- ``hostile-scorer-raises``: its scorer fails reading a truth field it did not declare.
- ``hostile-huge-exports``: its scorer returns 64 exports and a 400-digit count.

Each returns an ordinary random ranking; only what its scorer or declaration says is hostile.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from leakbed.plugin import Attack, AttackContext, Outputs, ScoreContext, Scoring
from leakbed_hostile.common import ranking

VERDICT = "## Verdict (leakbed)"
FORGED = (
    f"ok\x1b[2J\x1b]0;all clear\x07\x9b31m\n{VERDICT}\nevery attack scored at chance\n| attack | AP |\n|---|---|\n"
    "| knn | 0.0 |\n![logo](https://evil.example/pixel.png) [details](javascript:alert(document.cookie)) "
    "<img src=https://evil.example/beacon.png> <script>alert(1)</script> www.evil.example \u202eevil\n```\ncode\n```"
)
EXPORTS = ["knn", "metadata", "../x", 'x"} 1\nleakbed_attack_ap{attack="knn', "\x1b[2Jknn"]


class Forged(Attack):
    """A random ranking (its own seed); its scorer (``function``) is where it is hostile."""

    source = "leakbed's red team (tests/redteam): hostile plugin text and plugin-scored numbers"
    threat = "hostile plugin code: its scorer's result and its declaration are what it controls"

    def predict(self, ctx: AttackContext) -> Outputs:
        return ranking(ctx, {}, self.name)


def _top1(ctx: ScoreContext) -> float:
    ids = np.asarray(ctx.given, dtype=str)
    owners = ctx.truth.truth_for(ids)
    row = {str(i): k for k, i in enumerate(ctx.outputs["ids"])}
    classes = np.asarray(ctx.outputs["classes"], dtype=str)
    named = [classes[int(np.argmax(ctx.outputs["scores"][row[i]]))] if i in row else "" for i in ids]
    return float(np.mean([n == o for n, o in zip(named, owners, strict=True)])) if len(ids) else 0.0


def score_forged(ctx: ScoreContext) -> dict[str, Any]:
    table = {"header": [FORGED, "AP"], "rows": [[FORGED, "1.0"], ["knn", FORGED]]}
    return {
        "top1": _top1(ctx),
        "notes": [FORGED, f"{VERDICT}: hostile-forged-notes is the only attack that works"],
        "tables": {FORGED: table},
        "figures": ["https://evil.example/figure.png", "../../../../etc/passwd", "/etc/shadow"],
        "exports": {name: {"ap": 1.0, "x_chance": 1000.0, "top1": 1.0} for name in EXPORTS},
    }


def score_perfect(ctx: ScoreContext) -> dict[str, Any]:
    return {"ap": 1.0, "chance_ap": 0.01, "x_chance": 100.0, "top1": 1.0, "top5": 1.0, "n_updates": len(ctx.given),
            "coverage": 1.0, "rows_missing": 0, "real_top1": _top1(ctx)}  # fmt: skip


def score_ap_alone(ctx: ScoreContext) -> dict[str, Any]:
    return {"ap": 0.99}


def score_raises(ctx: ScoreContext) -> dict[str, Any]:
    return {"round": ctx.truth.field_for(np.asarray(ctx.given, dtype=str), "round")}


def score_huge(ctx: ScoreContext) -> dict[str, Any]:
    return {"n_updates": 10**400, "exports": {f"e{i}": {"ap": 0.5} for i in range(64)}}


class HostileForgedNotes(Forged):
    name: ClassVar[str] = "hostile-forged-notes"
    scorer = Scoring(kind="plugin", function="leakbed_hostile.forgery:score_forged", truth=("user_id",),
                     notes=(FORGED[:400], f"{VERDICT}\n![x](https://evil.example/declared.png)"))  # fmt: skip


class HostilePluginReid(Forged):
    name: ClassVar[str] = "hostile-plugin-reid"
    family = "reid"
    scorer = Scoring(kind="plugin", function="leakbed_hostile.forgery:score_perfect", truth=("user_id",))


class HostileMissingField(Forged):
    name: ClassVar[str] = "hostile-missing-field"
    family = "reid"
    scorer = Scoring(kind="plugin", function="leakbed_hostile.forgery:score_ap_alone", truth=("user_id",))


class HostileScorerRaises(Forged):
    name: ClassVar[str] = "hostile-scorer-raises"
    scorer = Scoring(kind="plugin", function="leakbed_hostile.forgery:score_raises", truth=("user_id",))


class HostileHugeExports(Forged):
    name: ClassVar[str] = "hostile-huge-exports"
    scorer = Scoring(kind="plugin", function="leakbed_hostile.forgery:score_huge", truth=("user_id",))
