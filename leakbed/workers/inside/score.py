"""A plugin's own scorer, inside the scoring sandbox.

``python -m workers.inside.score --out FD``: its inputs are what trusted code wrote for it alone, read-only under
``/leakbed/inputs`` (``request.json``: the attack, its output name, its params, the truth fields it declared, by
update id; ``outputs.npz``: its outputs as trusted code checked them; ``given.npy``: the ids it was given). The
scorer's result goes to the pipe ``FD`` as JSON; trusted code bounds and checks it (``workers.scoring``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np

from leakbed.workers.inside.reply import answer


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def score(inputs: Path) -> dict:
    from leakbed.attacks import registry
    from leakbed.attacks.scoring import ScoreContext, TruthView

    request = json.loads((inputs / "request.json").read_text(encoding="utf-8"))
    with np.load(inputs / "outputs.npz", allow_pickle=False) as z:
        outputs = {k: z[k] for k in z.files}
    given = np.load(inputs / "given.npy", allow_pickle=False)
    name, select = request["attack"], request.get("select", request["attack"])  # select: distribution:name
    module, _, function = registry.scoring(registry.attack(select)).function.partition(":")
    scorer = getattr(importlib.import_module(module), function)
    ctx = ScoreContext(name, request["output"], registry.params_of(select, request["params"]), outputs,
                       TruthView(request["truth"]), given)
    result = scorer(ctx)
    if not isinstance(result, dict):
        raise TypeError(f"the scorer returned {type(result).__name__}, not a dict")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leakbed.workers.inside.score", description="A plugin's scorer, in its sandbox.")
    parser.add_argument("--out", type=int, required=True, help="the pipe the result goes to [fd]")
    parser.add_argument("--inputs", default="/leakbed/inputs", help="its read-only inputs [path]")
    args = parser.parse_args(argv)
    return answer(args.out, lambda: {"result": _jsonable(score(Path(args.inputs)))}, 2000)


if __name__ == "__main__":
    sys.exit(main())
