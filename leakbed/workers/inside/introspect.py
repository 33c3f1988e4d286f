"""The introspection of attack plugins, inside a sandbox: load each named attack and write its declaration as JSON.

``python -m workers.inside.introspect --out FD NAME...``: importing an attack's module runs its code, so this runs
in the same sandbox as a lane (no store, no network). The JSON (``{"declarations": {name: ...}, "errors": {name:
"one line"}}``) goes to the pipe ``FD``, never to stdout, which the plugin's own prints may fill; trusted code reads
it as hostile data and checks every declaration with leakbed's own model (``workers.introspect``).
"""

from __future__ import annotations

import argparse
import sys

from leakbed.workers.inside.reply import send


def _one_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:500]


def introspect(names: list[str]) -> dict:
    from leakbed.attacks import registry

    out: dict = {"declarations": {}, "errors": {}}
    for name in names:
        try:
            out["declarations"][name] = registry.declare(name).model_dump(mode="json")
        except Exception as err:  # noqa: BLE001 - one plugin's failure is its own line, not the others'
            out["errors"][name] = str(err).splitlines()[0][:500] if isinstance(err, ValueError) else _one_line(err)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leakbed.workers.inside.introspect", description="Declare attack plugins as JSON.")
    parser.add_argument("--out", type=int, required=True, help="the pipe the JSON goes to [fd]")
    parser.add_argument("names", nargs="+", help="attack names [names]")
    args = parser.parse_args(argv)
    send(args.out, introspect(args.names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
