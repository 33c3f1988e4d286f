"""Scoring one attack: dispatch on its declaration's scorer kind (``referee.kinds``), or hand a plugin's own scorer
to the scoring sandbox (``workers.scoring``).

The referee knows an attack only by its declaration (data; ``core.declaration``) and never imports its code. A
kind's scorer is the referee's own function; a ``plugin`` kind runs the attack's function in the scoring sandbox,
which gets, read-only, only the outputs, the params and the truth fields the plugin declared, for the updates it
was given. Either way the declared notes are appended to the result's notes and the declared reference figures
are filed under ``reference``, both as the plugin's text (``core.plugin_text``: bounded, one line each; the report
escapes them again for Markdown). A plugin-scored result is marked ``scored_by: plugin``: its numbers are never the
referee's (``server.experiment`` files them apart, in ``plugin_scored``).
"""

from __future__ import annotations

from typing import Any

from leakbed.core.declaration import Declaration
from leakbed.core.plugin_text import plugin_text
from leakbed.referee.context import ScoreContext
from leakbed.referee.kinds import KINDS, PLUGIN, kind_names


class ScorerError(RuntimeError):
    """An attack names a scorer kind the referee does not have (one line)."""


def plugin_truth(decl: Declaration, ctx: ScoreContext) -> dict[str, list]:
    """The truth fields the plugin declared, for each given update in given order (None where one lacks it):
    ``user_id`` is the owner, ``round`` the training round, any other name a sealed per-update fact."""
    return ctx.truth.fields_for(ctx.given, list(decl.scoring.truth))


def _plugin(decl: Declaration, ctx: ScoreContext) -> dict[str, Any]:
    from leakbed.workers.scoring import score_plugin  # the scoring sandbox: imported only when a plugin scores itself

    result = score_plugin(
        decl=decl,
        outputs=ctx.outputs_dir / f"{ctx.name}.npz",
        truth=plugin_truth(decl, ctx),
        params=ctx.params.to_dict(),
        given=ctx.given,
        output=ctx.name,
    )
    return {**dict(result), "scored_by": "plugin"}


def score_one(decl: Declaration, ctx: ScoreContext) -> dict:
    """Attack ``decl``'s metrics on the outputs ``ctx`` names, by its declared scorer kind."""
    kind = decl.scoring.kind
    if kind == PLUGIN:
        result = _plugin(decl, ctx)
    elif kind in KINDS:
        result = KINDS[kind].score(ctx)
    else:
        raise ScorerError(f"attack {decl.name!r}: unknown scorer kind {kind!r} (the referee has {', '.join(kind_names())})")
    if decl.scoring.notes:
        result["notes"] = [*result.get("notes", []), *(plugin_text(n, "json") for n in decl.scoring.notes)]
    if decl.scoring.reference:
        result["reference"] = {plugin_text(k, "json", 64): plugin_text(v, "json") if isinstance(v, str) else v
                               for k, v in decl.scoring.reference.items()}  # fmt: skip
    return result
