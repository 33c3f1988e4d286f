"""``leakbed``: validate an experiment, run it in the Ray simulation, write and print the report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from core.config import ConfigError, ExperimentConfig, dump_config, load_config
from core.paths import default_run_dir

QUIET_ENV = {
    "FLWR_LOG_LEVEL": "ERROR",
    "GRPC_VERBOSITY": "ERROR",  # gRPC's fork notices while Ray forks next to the attack pool's channels
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


RAY_ADDRESS_HELP = "join this running Ray cluster (its head's GCS address) instead of a private local Ray"


def _fail(message: str) -> int:
    print(f"leakbed: error: {message}", file=sys.stderr)
    return 2


def preflight(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config with its plugins resolved, once every prior's federation loads and everything the config names
    can run on it (``leakbed.preflight``): bad input fails before anything starts."""
    from leakbed.preflight import preflight as check

    return check(cfg)


def _ray_set(args: argparse.Namespace) -> list[str]:
    """``--ray-address HOST:PORT`` as the last override (``simulation.ray_address``)."""
    address = getattr(args, "ray_address", None)
    return [] if address is None else [f"simulation.ray_address={address}"]


def _out_dir(cfg: ExperimentConfig, out: str | None) -> Path:
    path = Path(out) if out else default_run_dir(cfg.name)
    if path.exists() and any(path.iterdir()):
        raise ConfigError(f"--out {path}: folder exists and is not empty; refusing to overwrite it")
    return path


def _rich_table(title: str, header: list[str], rows: list[list[str]], caption: str = ""):  # noqa: ANN202
    """A rich table whose cells are plain text (no rich markup in a name or a plugin's words)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, caption=Text(caption) if caption else None, caption_justify="left")
    for h in header:
        table.add_column(h)
    for r in rows:
        table.add_row(*(Text(c) for c in r))
    return table


def _print_table(run_dir: Path) -> None:
    """The closed-world table; beside it the suite's other attacks (plugins included), and where each is written."""
    from rich.console import Console

    from leakbed.report import load_runs, other_attack_rows, table_footnote, table_rows, written_line

    runs = load_runs(run_dir)
    console = Console()
    title = "Re-identification (closed world): AP % (× chance), top-1 %, top-5 %"
    console.print(_rich_table(title, *table_rows(runs), caption=table_footnote(runs)))
    header, rows = other_attack_rows(runs)
    if rows:
        console.print(_rich_table("Other attacks (scored by the referee; details in the report)", header, rows))
        console.print(written_line(run_dir, runs), markup=False, highlight=False, soft_wrap=True)


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def run_experiment(cfg: ExperimentConfig, run_dir: Path, bar, label: str = "", link=None) -> Path:  # noqa: ANN001
    """Every prior of ``cfg`` (preflighted) on the simulation SuperLink ``link`` (or one of its own), then the
    report; returns its path. The ServerApp holds /metrics ``telemetry.hold_seconds`` after each prior."""
    from contextlib import nullcontext

    from leakbed.report import write_report
    from leakbed.simulate import simulate, simulation_link

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config(cfg))
    with nullcontext(link) if link is not None else simulation_link(cfg, run_dir / "logs") as link:
        for rule in cfg.split.priors:
            title = f"{label}{rule} prior: FL rounds"
            task = bar.add_task(title, total=cfg.fl.rounds)

            def progress(rnd: int, util: dict[str, float], task: int = task, title: str = title) -> None:
                if rnd:
                    bar.update(task, completed=rnd, description=f"{title} (utility {util['utility']:.3f})")

            simulate(cfg, rule, run_dir, progress, link)
    return write_report(run_dir)


def cmd_run(args: argparse.Namespace) -> int:
    from core.data import DataError

    try:
        cfg = load_config(args.config, [*args.set, *_ray_set(args)])
        run_dir = _out_dir(cfg, args.out)
        cfg = preflight(cfg)
    except (ConfigError, DataError, ValueError) as err:
        return _fail(str(err).splitlines()[0])
    from leakbed.simulate import SimulationFailed

    try:
        with _progress() as bar:
            report = run_experiment(cfg, run_dir, bar)
    except SimulationFailed as err:  # e.g. Ray never started, or no device answered within fl.startup_timeout
        print(f"leakbed: run failed: {err}", file=sys.stderr)
        return 1
    _print_table(run_dir)
    print(f"report: {report}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import json

    from core.config import read_tree
    from core.data import DataError
    from leakbed.sweep import (
        extends,
        grid_points,
        is_sweep_file,
        parse_grid,
        read_sweep_file,
        run_sweep,
        sweep_spec,
        write_sweep_report,
    )

    try:
        base, sets, grids = read_sweep_file(args.config) if is_sweep_file(args.config) else (read_tree(args.config), [], [])
        if not grids and not args.grid:
            raise ConfigError("sweep: give --grid KEY=V1,V2,... or a sweep file with [[sweep.grid]] entries")
        points = grid_points(base, [*sets, *args.set, *_ray_set(args)], parse_grid(args.grid), grids)
        first = next(iter(points.values()))
        out = Path(args.out) if args.out else default_run_dir(first.name + "-sweep")
        spec = {"config": args.config, "points": sweep_spec(points)}
        saved = out / "sweep.json"
        if saved.exists() and not extends(json.loads(saved.read_text()).get("points"), spec["points"]):
            raise ConfigError(f"--out {out}: holds a different sweep ({saved}); refusing to mix them")
        if not saved.exists() and out.exists() and any(out.iterdir()):
            raise ConfigError(f"--out {out}: folder exists, is not empty and is not a sweep")
        points = {key: preflight(cfg) for key, cfg in points.items()}
    except (ConfigError, DataError, ValueError) as err:
        return _fail(str(err).splitlines()[0])
    out.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(spec, indent=2))
    from leakbed.simulate import simulation_link

    with _progress() as bar, simulation_link(first, out / "logs") as link:  # one SuperLink and Ray head for every point
        ran = run_sweep(points, out, lambda cfg, folder: run_experiment(cfg, folder, bar, f"{folder.name}: ", link))
    report = write_sweep_report(points, out)
    print(f"ran {len(ran)} of {len(points)} points ({len(points) - len(ran)} reused); report: {report}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from core.data import DataError

    try:
        cfg = preflight(load_config(args.config, args.set))
    except (ConfigError, DataError, ValueError) as err:
        return _fail(str(err).splitlines()[0])
    print(dump_config(cfg), end="")
    return 0


def cmd_attack_worker(args: argparse.Namespace) -> int:
    from workers.remote import run

    return run(args)


def cmd_sandbox_run(args: argparse.Namespace) -> int:
    """Run a program in exactly the sandbox an attack's lane gets (``--store`` read-only at /leakbed/inputs, a
    writable tmpfs of its own at /leakbed/out, the working directory); its exit code and output pass through."""
    from workers import sandbox
    from workers.lane import INPUTS

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if not command:
            raise ValueError("no command: leakbed sandbox-run --store DIR -- CMD [ARGS...]")
        store = sandbox.check_store(args.store)
        if why := sandbox.available():
            raise ValueError(f"no sandbox can start here: {why}")
        limits = sandbox.Limits(memory_mb=args.memory_mb, processes=args.processes, file_size_mb=args.file_size_mb)
        if not 64 <= limits.memory_mb <= 1 << 20 or not 16 <= limits.processes <= 1 << 20 or not 1 <= limits.file_size_mb:
            raise ValueError("--memory-mb must be 64..1048576, --processes 16..1048576, --file-size-mb at least 1")
    except ValueError as err:
        return _fail(str(err))
    proc = sandbox.Sandbox(limits, [sandbox.Mount(store, INPUTS)]).popen(command)
    return proc.wait()


def cmd_deploy_local(args: argparse.Namespace) -> int:
    from core.data import DataError, federation
    from leakbed.deploy_local import DeployError, deploy_local

    try:
        cfg = load_config(args.config, args.set)
        out = _out_dir(cfg, args.out)
        cfg = preflight(cfg)
        users = len(federation(cfg, cfg.split.priors[0]).user_ids)
        n = args.supernodes or users
        if n != users:
            raise ConfigError(f"--supernodes {n}: the federation has {users} users and each SuperNode is one user")
        if not 1 <= args.workers <= 64 or not 0 <= args.metrics_port <= 65535 or not 0 <= args.hold <= 86_400:
            raise ConfigError("--workers must be 1..64, --metrics-port 0..65535, --hold 0..86400")
    except (ConfigError, DataError, ValueError) as err:
        return _fail(str(err).splitlines()[0])
    try:
        deploy_local(cfg, out, supernodes=n, workers=args.workers, metrics_port=args.metrics_port, hold_seconds=args.hold)
    except DeployError as err:
        print(f"leakbed: deploy-local failed: {err}", file=sys.stderr)
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from leakbed.report import RunFolderError, write_report

    run_dir = Path(args.run_dir)
    try:
        if not run_dir.is_dir():
            raise FileNotFoundError(f"{run_dir}: no such run folder")
        if not (run_dir / "config.toml").is_file():
            raise FileNotFoundError(f"{run_dir}: not a run folder (no config.toml)")
        path = write_report(run_dir)
    except (FileNotFoundError, RunFolderError) as err:
        return _fail(str(err).splitlines()[0])
    _print_table(run_dir)
    print(f"report: {path}")
    return 0


def cmd_compose(args: argparse.Namespace) -> int:
    from leakbed.compose import ComposeError, render, run_config, write_all

    if args.action != "render":
        from leakbed.compose_cli import run_action

        return run_action(args)
    try:
        if args.write:
            for path in write_all(args.supernodes, args.workers):
                print(f"wrote {path}", file=sys.stderr)
        else:
            print(render(args.file, args.supernodes, args.workers), end="")
    except ComposeError as err:
        return _fail(str(err))
    if args.write:  # both deployments written: the TLS overlay's run also names the workers' CA
        tls_hint = run_config(args.supernodes, args.workers, tls=True)
        print(f'with deploy/compose.tls.yml: flwr run . leakbed-compose --stream --run-config "{tls_hint}"', file=sys.stderr)
    hint = run_config(args.supernodes, args.workers, tls=args.file == "tls" and not args.write)
    print(f'start a run: flwr run . leakbed-compose --stream --run-config "{hint}"', file=sys.stderr)
    return 0


def cmd_open_world_sweep(args: argparse.Namespace) -> int:
    from core.data import DataError
    from studies.open_world_sweep import parse_seen, run_sweep, sweep_config

    try:
        seen = parse_seen(args.seen)
        cfg = sweep_config(load_config(args.config, args.set), args.prior)
        out = Path(args.out) if args.out else default_run_dir(cfg.name + "-open-world")
        if out.exists() and any(out.iterdir()) and not (out / "run").is_dir():
            raise ConfigError(f"--out {out}: folder exists, is not empty and is not an open-world sweep")
        cfg = preflight(cfg)
    except (ConfigError, DataError, ValueError) as err:
        return _fail(str(err).splitlines()[0])
    out.mkdir(parents=True, exist_ok=True)
    with _progress() as bar:
        report = run_sweep(cfg, args.prior, seen, out, lambda c, folder: run_experiment(c, folder, bar))
    print(f"report: {report}")
    return 0


RECONSTRUCTION_SUITE = 'attack.suite=["feature-inference", "dlg", "inverting-gradients"]'


def cmd_feature_inference(args: argparse.Namespace) -> int:
    """A preset of ``leakbed run``: seed 004's reconstruction attacks (deep-feature inference, DLG,
    Inverting Gradients) as the run's suite; the config's own --set overrides come after it."""
    args.set = [RECONSTRUCTION_SUITE, *args.set]
    return cmd_run(args)


def cmd_analyze(args: argparse.Namespace) -> int:
    """Seed 001 §6.2 / seed 000 §6.1.7 analyses of a finished run, written into ``RUN/analyses`` and its report."""
    from leakbed.analyze import run_analysis

    try:
        md = run_analysis(args)
    except (ConfigError, FileNotFoundError, ValueError, RuntimeError) as err:
        return _fail(str(err).splitlines()[0])
    print(md.read_text())
    print(f"written: {md} (and the run's report.md)")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leakbed", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for name, fn, help_ in (
        ("run", cmd_run, "run an experiment in the Ray simulation"),
        ("validate", cmd_validate, "check a config and its data, print the frozen config"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("config", nargs="?", help="experiment TOML (default: built-in defaults)")
        s.add_argument(
            "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field, e.g. fl.rounds=5"
        )
        if name == "run":
            s.add_argument("--out", help="run folder (must be new or empty)")
            s.add_argument("--ray-address", metavar="HOST:PORT", help=RAY_ADDRESS_HELP)
        s.set_defaults(fn=fn)
    w = sub.add_parser("sweep", help="run a grid of variants (e.g. defense strengths); resumable; privacy-utility report")
    w.add_argument("config", nargs="?", help="experiment TOML, or a sweep file ([sweep] with config, set, [[sweep.grid]])")
    w.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2,...", help="an axis, e.g. defenses.0.strength=0,0.5,1"
    )
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field for every point")
    w.add_argument("--out", help="sweep folder; an existing sweep folder is resumed")
    w.add_argument("--ray-address", metavar="HOST:PORT", help=RAY_ADDRESS_HELP)
    w.set_defaults(fn=cmd_sweep)
    from workers.remote import add_arguments as worker_arguments

    a = sub.add_parser("attack-worker", help="a remote attack worker: mutual TLS on TCP, the attack code in the sandbox")
    worker_arguments(a)
    a.set_defaults(fn=cmd_attack_worker)
    b = sub.add_parser("sandbox-run", help="run a program in exactly the sandbox an attack's lane gets, over a store folder")
    b.add_argument("--store", required=True, help="the store folder, read-only at /leakbed/inputs; the program writes only "
                   "/leakbed/out (its working directory, a tmpfs) [path]")
    b.add_argument("--memory-mb", type=int, default=8192, help="RLIMIT_DATA [MiB] (default 8192, as workers.limits.memory)")
    b.add_argument("--processes", type=int, default=1024, help="RLIMIT_NPROC of the sandbox user (default 1024)")
    b.add_argument("--file-size-mb", type=int, default=16384, help="RLIMIT_FSIZE [MiB] (default 16384)")
    b.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    b.set_defaults(fn=cmd_sandbox_run)
    d = sub.add_parser("deploy-local", help="TLS SuperLink, a SuperNode per user, attack workers, flwr run: local processes")
    d.add_argument("config", nargs="?", help="experiment TOML (default: built-in defaults)")
    d.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    d.add_argument("--out", help="deployment folder (must be new or empty): certs, logs, run")
    d.add_argument("--supernodes", type=int, default=0, help="SuperNodes; must equal the federation's users (default: that)")
    d.add_argument("--workers", type=int, default=2, help="attack worker processes (default 2)")
    d.add_argument("--metrics-port", type=int, default=0, help="ServerApp /metrics port (default: a free one)")
    d.add_argument("--hold", type=float, default=5.0, help="keep /metrics up this long after each run [s] (default 5)")
    d.set_defaults(fn=cmd_deploy_local)
    o = sub.add_parser("open-world-sweep", help="open-world re-identification and matching vs share of seen users (Figure 6)")
    o.add_argument("config", nargs="?", help="experiment TOML (default: built-in defaults)")
    o.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    o.add_argument("--seen", default="0,0.25,0.5,0.75,1", metavar="S1,S2,...", help="shares of seen users (default 0..1 by 0.25)")
    o.add_argument("--prior", default="chrono", help="prior rule of the one FL run: chrono (default, as the seed) or random")
    o.add_argument("--out", help="sweep folder; a finished FL run in it is reused")
    o.set_defaults(fn=cmd_open_world_sweep)
    f = sub.add_parser(
        "feature-inference", help="leakbed run with the suite feature-inference, dlg, inverting-gradients (seed 004 Table 1)"
    )
    f.add_argument("config", nargs="?", help="experiment TOML (default: built-in defaults)")
    f.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    f.add_argument("--out", help="run folder (must be new or empty)")
    f.set_defaults(fn=cmd_feature_inference)
    a = sub.add_parser("analyze", help="analyses of a finished run: layers, progress, prior-size, train-size, raw-vs-update")
    a.add_argument("analysis", choices=["layers", "progress", "prior-size", "train-size", "raw-vs-update"])
    a.add_argument("run_dir", help="a finished run folder (holds config.toml)")
    a.add_argument("--prior", help="which prior's run (default: the first)")
    a.add_argument("--ranges", type=int, default=10, help="progress: round ranges per axis (default 10)")
    a.add_argument("--sizes", help="prior-size / train-size: comma-separated sizes, e.g. 1,2,4,8")
    a.add_argument("--every", type=int, default=1, help="layers / prior-size: replay every k-th stored round (default 1)")
    a.add_argument("--set-sizes", help="raw-vs-update: images per set, e.g. 2,4,8,16")
    a.add_argument("--epochs", type=int, default=20, help="raw-vs-update: epochs of the raw-image classifier")
    a.set_defaults(fn=cmd_analyze)
    r = sub.add_parser("report", help="re-write the report of a finished run")
    r.add_argument("run_dir")
    r.set_defaults(fn=cmd_report)
    c = sub.add_parser("compose", help="the deployment as containers: render its files; build, up, down")
    c.add_argument(
        "action",
        nargs="?",
        default="render",
        choices=["render", "build", "up", "down"],
        help="render (default): print or --write the files; build: the images; up: build, render and start; down: remove it all",
    )
    c.add_argument("--tls", action="store_true", help="up: with the TLS overlay (certificates made in the stack's folder)")
    c.add_argument("--base", default="auto", help="build/up: auto, official (Flower's images) or local (from Debian packages)")
    c.add_argument("--gpu", action="store_true", help="build/up: also build the CUDA image")
    c.add_argument("--no-build", action="store_true", help="up: use the images already built")
    c.add_argument(
        "--plugin", action="append", default=[], metavar="PATH", help="build/up: install this plugin package in the app image"
    )
    c.add_argument("--project", default="leakbed", help="build/up/down: the compose project name (default leakbed)")
    c.add_argument(
        "--ports",
        default="9093,9090,3000",
        metavar="LINK,PROM,GRAFANA",
        help="up: the host ports of the SuperLink, Prometheus and Grafana (default 9093,9090,3000)",
    )
    c.add_argument("--engine", default="auto", help="build/up/down: auto, docker or podman (default auto)")
    c.add_argument("--supernodes", type=int, default=3, help="SuperNodes = users, one per partition-id (default 3)")
    c.add_argument("--workers", type=int, default=2, help="attack workers (default 2)")
    c.add_argument("--file", default="base", help="which file to print: base, tls, gpu or prometheus (default base)")
    c.add_argument("--write", action="store_true", help="write all four files into the repository instead of printing one")
    c.set_defaults(fn=cmd_compose)
    return p


def main(argv: list[str] | None = None) -> int:
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    args = parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
