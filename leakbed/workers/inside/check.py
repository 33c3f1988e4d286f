"""An attack's own checks before a run starts, inside a sandbox: its params model's validators and its ``check`` hook.

``python -m workers.inside.check --out FD --inputs DIR``: ``DIR/request.json`` names each attack with its params
table (already checked against its declared schema by trusted code) and, per prior, a folder holding the
attacker's knowledge (its prior data, the corpus' shape) and ``setting.json`` (the training the devices will do).
The reply, to the pipe ``FD``: each attack's params as its own model normalised them, or one line saying why the
run cannot serve it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from leakbed.workers.inside.reply import answer


def _one_line(err: BaseException, where: str) -> str:
    from pydantic import ValidationError

    if isinstance(err, ValidationError):
        first = err.errors()[0]
        loc = ".".join([where, *(str(p) for p in first["loc"])])
        return f"{loc}: {first['msg'].removeprefix('Value error, ')}"[:500]
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{where}: {text}"[:500]


def check(inputs: Path) -> dict:
    from leakbed.attacks import registry
    from leakbed.core.declaration import Setting
    from leakbed.core.knowledge import AttackerKnowledge

    request = json.loads((inputs / "request.json").read_text(encoding="utf-8"))
    settings = []
    for rule in request["priors"]:
        folder = inputs / rule
        facts = json.loads((folder / "setting.json").read_text(encoding="utf-8"))
        knowledge = AttackerKnowledge.load(folder)
        settings.append(Setting(
            source=facts["source"], corpus=knowledge.corpus_meta, prior=knowledge.prior, model=facts["model"],
            parameters=tuple(facts["parameters"]), optimizer=facts["optimizer"], momentum=float(facts["momentum"]),
            local_steps=int(facts["local_steps"]), secure_aggregation=bool(facts["secure_aggregation"]),
        ))  # fmt: skip
    out: dict = {"params": {}, "errors": {}}
    for name, table in request["attacks"].items():
        where = f"attack.params.{name}"
        try:
            params = registry.params_of(name, table)
            for setting in settings:
                why = registry.attack(name).check(params, setting)
                if why:
                    raise ValueError(str(why))
            out["params"][name] = params.model_dump(mode="json")
        except Exception as err:  # noqa: BLE001 - each attack's refusal is one line
            out["errors"][name] = str(err).splitlines()[0][:500] if isinstance(err, ValueError) and str(err).startswith(
                "attack.") else _one_line(err, where)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leakbed.workers.inside.check", description="Attacks' own checks, in a sandbox.")
    parser.add_argument("--out", type=int, required=True, help="the pipe the reply goes to [fd]")
    parser.add_argument("--inputs", default="/leakbed/inputs", help="its read-only inputs [path]")
    args = parser.parse_args(argv)
    return answer(args.out, lambda: check(Path(args.inputs)), 1000)


if __name__ == "__main__":
    sys.exit(main())
