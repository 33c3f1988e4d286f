"""TLS on the attack service: a worker with the certificate of deploy/certs.sh, a pool that checks it.

A pool given the CA (``attack.tls_root_cert``) delivers rounds, updates and fits to a TLS worker;
a plaintext channel, or a pool trusting another CA, reaches nothing; the worker's flags come in
pairs and ``leakbed attack-worker`` passes them on; a missing CA file is refused before a run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import grpc
import numpy as np
import pytest

from attacks import AttackPool, RoundSnapshot
from attacks.transport import pb, pb_grpc
from attacks.worker import main, read_tls, serve
from core.config import ConfigError
from core.processes import free_port
from core.store import UpdateStore
from tests.attacks.test_pool import TRAIN, _anon, _knowledge
from tests.conftest import tiny_config

REPO = Path(__file__).resolve().parents[2]


def _certs(out: Path) -> Path:
    made = subprocess.run(["bash", str(REPO / "deploy" / "certs.sh"), str(out), "0"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, worker.pem, worker.key (SANs localhost, 127.0.0.1, attack-worker-*) of a throwaway CA."""
    return _certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CA of another deployment: it did not sign the worker's certificate."""
    return _certs(tmp_path_factory.mktemp("other")) / "ca.crt"


@pytest.fixture
def tls_worker(tmp_path: Path, certs: Path):
    """A worker serving over TLS on 127.0.0.1; yields its address and store root."""
    port = free_port()
    server = serve(port, tmp_path, tls=read_tls(certs / "worker.pem", certs / "worker.key"))
    yield f"127.0.0.1:{port}", tmp_path
    server.stop(0)


def _ping(channel: grpc.Channel, timeout: float = 5.0) -> pb.Ack:
    return pb_grpc.AttackServiceStub(channel).Ping(pb.PingRequest(), timeout=timeout)


def test_the_worker_certificate_names_the_compose_services(certs: Path):
    sans = subprocess.run(
        ["openssl", "x509", "-in", str(certs / "worker.pem"), "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True,
    ).stdout
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:attack-worker-0", "DNS:attack-worker-7"):
        assert name in sans, sans
    assert "attack-worker-8" not in sans  # LEAKBED_CERT_WORKERS defaults to 8
    assert (certs / "worker.key").stat().st_mode & 0o077 == 0


def test_a_pool_with_the_ca_delivers_rounds_updates_and_fits_over_tls(tls_worker, certs: Path):
    address, root = tls_worker
    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    pool = AttackPool(
        knowledge, str(root), workers=1, queue_size=8, submit_timeout=30, addresses=[address], retry_seconds=30,
        run_id="r", tls_root_cert=str(certs / "ca.crt"),
    )
    try:
        assert pool.tls and not pool.local
        pool.submit_round(RoundSnapshot(1, arrays, TRAIN))
        pool.submit_updates(_anon(1, 3, dim, np.random.default_rng(0)))
        assert pool.drain(120)
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    s = pool.stats
    assert (s.tapped, s.analysed, s.failed, s.rounds_analysed) == (3, 3, 0, 1) and not s.errors, s.errors
    assert s.fit_seconds["knn"] == s.fit_seconds["knn"]  # not NaN: fitted
    assert len(UpdateStore(root / "r").read_predictions("knn")["ids"]) == 3


@pytest.mark.parametrize("trust", ["plaintext", "wrong-ca"])
def test_a_pool_that_does_not_trust_the_worker_delivers_nothing(tls_worker, other_ca: Path, trust: str):
    address, root = tls_worker
    knowledge, _, _ = _knowledge()
    pool = AttackPool(
        knowledge, str(root), workers=1, queue_size=4, submit_timeout=5, addresses=[address], retry_seconds=2,
        run_id="r", tls_root_cert=str(other_ca) if trust == "wrong-ca" else "",
    )
    try:
        assert pool.tls == (trust == "wrong-ca")
        pool.submit_updates(_anon(1, 2, 7, np.random.default_rng(1)))
        assert pool.drain(60)
    finally:
        pool.close()
    s = pool.stats
    assert (s.analysed, s.failed) == (0, 2) and any("no attack worker reachable" in e for e in s.errors), s.errors
    assert not (root / "r" / "anon").exists() or not list((root / "r" / "anon").glob("*.npz"))


def test_the_worker_process_serves_tls_only(tmp_path: Path, certs: Path):
    """``python -m attacks.worker --ssl-certfile --ssl-keyfile``: TLS with the CA answers, plaintext does not."""
    port = free_port()
    argv = [sys.executable, "-m", "attacks.worker", "--port", str(port), "--store", str(tmp_path)]
    argv += ["--ssl-certfile", str(certs / "worker.pem"), "--ssl-keyfile", str(certs / "worker.key")]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    credentials = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes())
    try:
        with grpc.secure_channel(f"localhost:{port}", credentials) as secure:
            ack = pb_grpc.AttackServiceStub(secure).Ping(pb.PingRequest(), timeout=120, wait_for_ready=True)
            assert ack.worker_pid == proc.pid
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain, pytest.raises(grpc.RpcError) as err:
            _ping(plain)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "(TLS," in out, out


@pytest.mark.parametrize("given", ["--ssl-certfile", "--ssl-keyfile"])
def test_the_worker_refuses_half_a_tls_pair(tmp_path: Path, certs: Path, capsys, given: str):
    with pytest.raises(SystemExit) as exc:
        main(["--port", str(free_port()), "--store", str(tmp_path), given, str(certs / "worker.pem")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "both --ssl-certfile and --ssl-keyfile" in err
    with pytest.raises(SystemExit) as exc:
        main(["--port", "5", "--store", str(tmp_path), "--ssl-certfile", str(tmp_path / "no.pem"), "--ssl-keyfile", "no.key"])
    assert exc.value.code == 2 and "cannot read the TLS certificate" in capsys.readouterr().err


def test_leakbed_attack_worker_passes_the_tls_flags_on(monkeypatch: pytest.MonkeyPatch):
    import attacks.worker
    from leakbed.cli import main as cli_main

    seen: list[list[str]] = []
    monkeypatch.setattr(attacks.worker, "main", lambda argv: seen.append(argv) or 0)
    base = ["attack-worker", "--port", "7070", "--store", "/s"]
    assert cli_main([*base, "--ssl-certfile", "/c/worker.pem", "--ssl-keyfile", "/c/worker.key"]) == 0
    assert cli_main(base) == 0
    tls, plain = seen
    assert tls[tls.index("--ssl-certfile") + 1] == "/c/worker.pem" and tls[tls.index("--ssl-keyfile") + 1] == "/c/worker.key"
    assert "--ssl-certfile" not in plain and "--ssl-keyfile" not in plain


def test_a_missing_ca_file_is_refused_before_the_run(tmp_path: Path):
    from leakbed.cli import preflight
    from server.run_parts import RunParts

    missing = str(tmp_path / "ca.crt")
    remote = tiny_config("attack.worker_addresses=[\"10.0.0.5:7070\"]", f"attack.tls_root_cert={missing}")
    with pytest.raises(ConfigError, match="attack.tls_root_cert .*no such file"):
        preflight(remote)
    with pytest.raises(ValueError, match="attack.tls_root_cert .*no such file"):
        RunParts.pool(SimpleNamespace(cfg=remote), addresses=remote.attack.worker_addresses)
    # local workers stay plaintext: the CA is not read, so its absence is no error there
    from leakbed.cli import _check_tls_root_cert

    _check_tls_root_cert(tiny_config(f"attack.tls_root_cert={missing}"))

