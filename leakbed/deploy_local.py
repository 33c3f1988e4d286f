"""``leakbed deploy-local``: the deployment topology as local processes, without Docker.

On 127.0.0.1: a SuperLink with TLS (a private CA from the shipped ``leakbed/deploy/certs.sh``) and SuperNode
authentication, one SuperNode per user (its partition-id names the user; its key registered with
``flwr supernode register``), ``W`` attack workers (``leakbed attack-worker``, gRPC over TLS with
the worker certificate of the same CA, sharing the run's store folder), then ``flwr run`` of leakbed's
app (a minimal app folder naming the installed components, written into ``OUT/app``) once per prior. The ServerApp serves
Prometheus metrics; the command scrapes them over HTTP while the run goes on and prints the
round count and each attack's AP from the final scrape. Every process it started is stopped at
the end (also on Ctrl-C or failure) and their temporary folder (``OUT/tmp``, their ``TMPDIR``) removed; their logs
stay in ``OUT/logs``.
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from leakbed import flower
from leakbed.core.config import ExperimentConfig, dump_config
from leakbed.core.errors import Failed
from leakbed.core.layout import RunLayout
from leakbed.core.processes import ProcessGroup, free_ports
from leakbed.launcher import ProcessLauncher
from leakbed.package_data import DEPLOY

CONNECTION = "leakbed-local"


class DeployError(Failed, RuntimeError):
    """A step of the local deployment failed; the message is one line naming it."""

    what = "deploy-local"


def scrape(url: str, timeout: float = 5.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``{sample name: [(labels, value), ...]}`` of a Prometheus text endpoint."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode("utf-8")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def value(samples: dict, name: str, **labels: str) -> float | None:
    """The first sample of ``name`` whose labels include ``labels``."""
    for got, v in samples.get(name, []):
        if all(got.get(k) == want for k, want in labels.items()):
            return v
    return None


def _by_attack(samples: dict, name: str, prior: str) -> dict[str, float]:
    return {labels["attack"]: v for labels, v in samples.get(name, []) if labels.get("prior") == prior}


class Deployment(ProcessLauncher):
    """The local-deployment launcher (``leakbed.launcher``): the processes of one deployment (``start``; their logs in
    ``<out>/logs``), each in a session of its own and marked (one ``core.processes.ProcessGroup``), ended with
    everything they started (``stop``), however far it detached."""

    def __init__(self, out: Path, env: dict[str, str], group: ProcessGroup | None = None) -> None:
        super().__init__(out / "logs", env, group)
        self.out = out

    def run(self, name: str, argv: list[str], timeout: float) -> str:
        """A short command (certificates, registration); its output, or a DeployError naming it."""
        proc = self.group.start(name, argv, self.env, None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise DeployError(f"{name}: no answer within {timeout:.0f}s") from None
        finally:
            self.group.started.pop(name, None)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._logs[name] = self.logs_dir / f"{name}.log"
        self._logs[name].write_text(out + err)
        if proc.returncode != 0:
            last = (err or out).strip().splitlines()[-1:] or ["(no output)"]
            raise DeployError(f"{name} exited with {proc.returncode}: {last[0]}")
        return out

    def check_alive(self) -> str:
        """'' while every long-lived process still runs (a ``flwr run``, ``flwr-run-<prior>``, may have finished with
        code 0), else which one ended and why."""
        for name, p in self.procs.items():
            code = p.poll()
            if code is None or (name.startswith("flwr-run-") and code == 0):
                continue
            log = self.logs_dir / f"{name}.log"
            return f"{name} exited with code {code}{_error_in(log)}; see {log}"
        return ""


REFUSAL = "leakbed: error: "  # how the ServerApp logs a config its preflight refuses (leakbed.apps)
ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Timeout|Failed|Cancelled)\w*: .+")


def _error_in(log: Path) -> str:
    """``: <the ServerApp's one-line refusal, or the last exception line>`` of a process log (what ``flwr run``
    streams), or ''."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    refused = [line.split(REFUSAL, 1)[1].strip() for line in lines if REFUSAL in line]
    if refused:
        return f": {refused[-1]}"
    found = [line.strip() for line in lines if ERROR_LINE.match(line.strip())]
    return f": {found[-1]}" if found else ""


def _wait(check: Callable[[], bool], timeout: float, what: str, dep: Deployment) -> None:
    try:
        flower.wait_until(check, timeout, what, dep.check_alive)
    except flower.NotReady as err:
        raise DeployError(str(err)) from None


def _https_ok(url: str, ca: Path) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ssl.create_default_context(cafile=str(ca))) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError):
        return False


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Ports:
    superlink: int
    supernodes: list[int]
    workers: list[int]
    metrics: int

    @classmethod
    def pick(cls, supernodes: int, workers: int, metrics: int = 0) -> Ports:
        ports = free_ports(1 + supernodes + workers + 1)
        link, rest = ports[0], ports[1:]
        return cls(link, rest[:supernodes], rest[supernodes : supernodes + workers], metrics or rest[-1])


def deploy_local(
    cfg: ExperimentConfig,
    out: Path,
    *,
    supernodes: int,
    workers: int = 2,
    metrics_port: int = 0,
    hold_seconds: float = 30.0,
    timeout: float = 3600.0,
    say: Callable[[str], None] = print,
) -> dict[str, dict]:
    """Start the topology, run every prior of ``cfg``, return ``{prior: final scrape summary}``; stops everything."""
    bin_dir = Path(sys.executable).parent
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ports = Ports.pick(supernodes, workers, metrics_port)
    home, certs, run_dir = out / "flwr-home", out / "certs", out / "run"
    tmp = out / "tmp"  # every process's temporary files, removed with the deployment
    tmp.mkdir(exist_ok=True)
    env = flower.environment(home, GRPC_VERBOSITY="ERROR", NO_COLOR="1", COLUMNS="200", TMPDIR=str(tmp))
    link = f"127.0.0.1:{ports.superlink}"
    flower.write_home(home, CONNECTION, link, root_certificates=certs / "ca.crt")
    # The run's config as the ServerApp will load it: the attack workers' addresses and CA, /metrics added.
    run_cfg = cfg.model_copy(
        update={
            "workers": cfg.workers.model_copy(
                update={
                    "addresses": [f"127.0.0.1:{p}" for p in ports.workers],
                    "tls_root_cert": str(certs / "ca.crt"),
                    "tls_cert": str(certs / "pool.pem"),
                    "tls_key": str(certs / "pool.key"),
                }
            ),
            "telemetry": cfg.telemetry.model_copy(
                update={"port": ports.metrics, "host": "127.0.0.1", "hold_seconds": hold_seconds}
            ),
        }
    )
    config_path = out / "experiment.toml"
    config_path.write_text(dump_config(run_cfg))
    app = flower.write_app(out / "app")

    dep = Deployment(out, env)
    results: dict[str, dict] = {}
    try:
        dep.run("certs", ["bash", str(DEPLOY / "certs.sh"), str(certs), str(supernodes)], 120)
        dep.start(
            "superlink",
            [
                str(bin_dir / "flower-superlink"),
                *("--host", "127.0.0.1", "--port", str(ports.superlink)),
                *("--ssl-ca-certfile", str(certs / "ca.crt")),
                *("--ssl-certfile", str(certs / "server.pem"), "--ssl-keyfile", str(certs / "server.key")),
                "--enable-supernode-auth",
                *("--database", str(out / "superlink.db")),
                "--disable-runtime-dependency-installation",
            ],
        )
        _wait(lambda: _https_ok(f"https://{link}/health", certs / "ca.crt"), 120, f"SuperLink https://{link}/health", dep)
        say(f"SuperLink (TLS, SuperNode auth) on {link}")
        for i in range(supernodes):
            dep.run(
                f"register-{i}", [str(bin_dir / "flwr"), "supernode", "register", str(certs / f"node-{i}.pub"), CONNECTION], 120
            )
        for i, port in enumerate(ports.supernodes):
            dep.start(
                f"supernode-{i}",
                [
                    str(bin_dir / "flower-supernode"),
                    *("--superlink", link, "--root-certificates", str(certs / "ca.crt")),
                    *("--auth-supernode-private-key", str(certs / f"node-{i}")),
                    *("--port", str(port), "--node-config", f"partition-id={i} num-partitions={supernodes}"),
                ],
            )
        store_root = RunLayout(run_dir).store_root  # the workers serve <store root>/<run id>, as the ServerApp files it
        store_root.mkdir(parents=True, exist_ok=True)
        for i, port in enumerate(ports.workers):
            dep.start(
                f"attack-worker-{i}",
                [
                    *(str(bin_dir / "leakbed"), "attack-worker"),
                    *("--port", str(port), "--store", str(store_root)),
                    *("--sandbox", cfg.workers.sandbox),  # the same sandbox as a simulation's workers
                    *("--log-dir", str(out / "logs" / f"attack-worker-{i}")),
                    *("--ssl-certfile", str(certs / "worker.pem"), "--ssl-keyfile", str(certs / "worker.key")),
                    *("--ssl-ca-certfile", str(certs / "ca.crt")),
                ],
            )
        _wait(lambda: all(_port_open(p) for p in ports.workers), 120, "the attack workers", dep)
        say(f"{supernodes} SuperNodes registered and started; {workers} attack workers (mutual TLS) on ports {ports.workers}")
        url = f"http://127.0.0.1:{ports.metrics}/metrics"
        for prior in cfg.split.priors:
            results[prior] = _run_prior(dep, bin_dir, app, config_path, run_dir, prior, url, timeout, say)
        say(f"report: {run_dir / 'report.md'}")
    finally:
        dep.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # its processes' temporary files: they have all ended
    return results


def _run_prior(
    dep: Deployment, bin_dir: Path, app: Path, config_path: Path, run_dir: Path, prior: str, url: str, timeout: float, say
) -> dict:
    """One ``flwr run``; polls /metrics until the run is finished and returns the final values."""
    run_config = flower.run_config({"config": str(config_path), "out-dir": str(run_dir), "prior": prior})
    flwr = dep.start(
        f"flwr-run-{prior}", [str(bin_dir / "flwr"), "run", str(app), CONNECTION, "--stream", "--run-config", run_config]
    )
    deadline, last_round, final = time.monotonic() + timeout, -1.0, None
    while time.monotonic() < deadline:
        if why := dep.check_alive():
            raise DeployError(why)
        try:
            samples = scrape(url)
        except (urllib.error.URLError, OSError, ValueError):
            samples = None
        if samples is not None:
            rnd = value(samples, "leakbed_round", prior=prior)
            if rnd is not None and rnd != last_round:
                say(f"[{prior}] round {rnd:.0f} / {value(samples, 'leakbed_rounds_planned', prior=prior) or 0:.0f}")
                last_round = rnd
            if value(samples, "leakbed_run_finished", prior=prior) == 1:
                final = samples
                break
        if flwr.poll() is not None and samples is None:  # the ServerApp is gone and never showed a finished run
            log = dep.logs_dir / f"flwr-run-{prior}.log"
            ended = f"flwr run of prior {prior} ended without a finished run (exit {flwr.returncode})"
            raise DeployError(f"{ended}{_error_in(log)}; see {log}")
        time.sleep(1.0)
    if final is None:
        raise DeployError(f"prior {prior}: no finished run on {url} within {timeout:.0f}s")
    summary = {
        "round": value(final, "leakbed_round", prior=prior),
        "ap": {labels["attack"]: v for labels, v in final.get("leakbed_attack_ap", []) if labels.get("prior") == prior},
        "x_chance": {
            labels["attack"]: v for labels, v in final.get("leakbed_attack_x_chance", []) if labels.get("prior") == prior
        },
        "updates_analysed": value(final, "leakbed_updates_analysed_total", prior=prior),
        "updates_tapped": value(final, "leakbed_updates_tapped_total", prior=prior),
    }
    summary["plugin_scored"] = sorted(
        {labels["attack"] for labels, _ in final.get("leakbed_attack_ap", []) if labels.get("scorer") == "plugin"}
    )
    say(finished_line(prior, summary))
    try:
        flwr.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise DeployError(f"flwr run of prior {prior} did not return") from None
    return summary


def finished_line(prior: str, summary: dict) -> str:
    """The line a finished prior ends with: each attack's AP in percent (every table's unit) with its × chance, a
    plugin's own scorer's marked; where no attack exported an AP (a suite without closed-world attackers), it says
    so and where the numbers are."""
    plugin = set(summary.get("plugin_scored", ()))
    aps = []
    for attack, ap in sorted(summary["ap"].items()):
        x = summary["x_chance"].get(attack)
        aps.append(f"{attack} AP {100 * ap:.1f}%" + (f" ({x:.1f}× chance)" if x is not None else "")
                   + (" (plugin-scored)" if attack in plugin else ""))  # fmt: skip
    done = f"[{prior}] finished after round {summary['round']:.0f}"
    if not aps:
        return f"{done}; no attack exported an AP (its numbers are in the report)"
    return f"{done}: {', '.join(aps)}"
