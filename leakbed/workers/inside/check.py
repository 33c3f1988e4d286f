"""An attack's own checks before a run starts, inside a sandbox: its params model (its validators, and whatever
constraint leakbed's params language has no word for) and its ``check`` hook, over one prior at a time.

``python -m workers.inside.check --out FD --inputs DIR``: ``DIR/request.json`` names each attack with its params
table (already checked against its declaration by trusted code) and the prior this call serves, if any; that
prior's folder ``DIR/prior`` holds the attacker's knowledge of it (its prior data, the corpus' shape) and
``setting.json`` (the training the devices will do). Nothing of any other prior is here: one sandboxed call per
prior (``workers.checks``). Without a prior, only the params models run (no hook sees any data). The reply, to the
pipe ``FD``: each attack's params as its own model normalised them, or one line saying why the run cannot serve it.
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


def _setting(folder: Path) -> object:
    from leakbed.core.declaration import Setting
    from leakbed.core.knowledge import AttackerKnowledge

    facts = json.loads((folder / "setting.json").read_text(encoding="utf-8"))
    knowledge = AttackerKnowledge.load(folder)
    return Setting(
        source=facts["source"], corpus=knowledge.corpus_meta, prior=knowledge.prior, model=facts["model"],
        parameters=tuple(facts["parameters"]), optimizer=facts["optimizer"], momentum=float(facts["momentum"]),
        local_steps=int(facts["local_steps"]), secure_aggregation=bool(facts["secure_aggregation"]),
    )  # fmt: skip


def check(inputs: Path) -> dict:
    from leakbed.attacks import registry

    request = json.loads((inputs / "request.json").read_text(encoding="utf-8"))
    setting = _setting(inputs / "prior") if request.get("prior") else None
    out: dict = {"params": {}, "errors": {}}
    for name, table in request["attacks"].items():
        where = f"attack.params.{name}"
        try:
            params = registry.params_of(name, table)
            if setting is not None:
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
