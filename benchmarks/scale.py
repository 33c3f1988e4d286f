"""The scale benchmark (issue 5): a Ray simulation of 300 synthetic clients with the attack pool on.

``python -m benchmarks.scale [--users 300] [--fraction 0.15] [--rounds 5] [--client-gpus 0] [--device auto]
[cohort options]``

The measurement is ``benchmarks.cohort`` (wall time per round, peak memory of the process tree,
attack-pool lag in rounds) at the scale the issue asks for: 300 virtual SuperNodes, C = 0.15
(45 clients a round). It adds the GPU paths: ``--client-gpus`` sets ``simulation.client_gpus``,
the fraction of a GPU each Ray ClientApp actor reserves (``leakbed.simulate.backend_config``
hands it to Ray as ``client_resources.num_gpus``), and ``--device`` the torch device of clients
and server. Asking for GPUs on a machine without CUDA stops with a one-line error before
anything starts (Ray would otherwise wait forever for a GPU actor slot).
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import cohort
from benchmarks.common import quiet_env

quiet_env()  # before anything imports flwr

DEFAULTS = {"users": 300, "fraction": 0.15, "rounds": 5}


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Scale options; everything else goes to ``benchmarks.cohort`` unchanged."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0], add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--users", type=int, default=DEFAULTS["users"], help="virtual SuperNodes (default 300)")
    p.add_argument("--fraction", type=float, default=DEFAULTS["fraction"], help="clients per round C (default 0.15)")
    p.add_argument("--rounds", type=int, default=DEFAULTS["rounds"], help="FL rounds (default 5)")
    p.add_argument("--client-gpus", type=float, default=0.0, help="GPU fraction per Ray client actor (default 0)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="torch device (default auto)")
    return p.parse_known_args(argv)


def cohort_argv(args: argparse.Namespace, rest: list[str]) -> list[str]:
    """The ``benchmarks.cohort`` command line of a scale run (GPU settings as config overrides)."""
    argv = ["--users", str(args.users), "--fraction", str(args.fraction), "--rounds", str(args.rounds)]
    argv += ["--set", f"simulation.client_gpus={args.client_gpus}", "--set", f"device={args.device}"]
    return argv + rest


def check_gpus(args: argparse.Namespace) -> str | None:
    """A one-line reason why the GPU settings cannot run here, or None."""
    if args.client_gpus <= 0 and args.device != "cuda":
        return None
    import torch

    if not torch.cuda.is_available():
        return f"--client-gpus {args.client_gpus} / --device {args.device}: no CUDA device on this machine"
    return None


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(sys.argv[1:] if argv is None else argv)
    if args.help:
        print(__doc__)
        return cohort.main(["--help"])
    if args.users < 300:
        print(f"note: --users {args.users} is below the issue's 300-client scale", file=sys.stderr)
    reason = check_gpus(args)
    if reason:
        print(f"benchmarks.scale: error: {reason}", file=sys.stderr)
        return 2
    return cohort.main(cohort_argv(args, rest))


if __name__ == "__main__":
    sys.exit(main())
