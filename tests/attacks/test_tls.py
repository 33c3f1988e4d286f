"""Mutual TLS on the attack service: a remote worker serves only a pool holding a certificate of the run's CA.

A pool with the CA and its own certificate (``attack.tls_*``, ``deploy/certs.sh``'s ``pool``) delivers
rounds, updates and fits; a plaintext client, a client without a certificate, one with another CA's
certificate, and a pool trusting another CA reach nothing. ``leakbed attack-worker`` serves that way with the
attack code in the sandbox behind it; missing files are refused before a run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
from workers.inside.worker import serve

from core.config import ConfigError
from core.processes import free_port
from core.records import RoundSnapshot
from core.store import UpdateStore
from tests.attacks.test_pool import TRAIN, _anon, _knowledge
from tests.conftest import tiny_config
from workers import AttackPool
from workers.tls import TlsFiles, server_credentials
from workers.transport import pb, pb_grpc

REPO = Path(__file__).resolve().parents[2]


def _certs(out: Path) -> Path:
    made = subprocess.run(["bash", str(REPO / "deploy" / "certs.sh"), str(out), "0"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, worker.pem/.key (SANs localhost, 127.0.0.1, attack-worker-*), pool.pem/.key of a throwaway CA."""
    return _certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another deployment's CA and certificates: it signed neither the worker's nor the pool's."""
    return _certs(tmp_path_factory.mktemp("other"))


def pool_files(certs: Path) -> TlsFiles:
    return TlsFiles(certs / "ca.crt", certs / "pool.pem", certs / "pool.key")


@pytest.fixture
def tls_worker(tmp_path: Path, certs: Path):
    """A worker serving over mutual TLS on 127.0.0.1; yields its address and store root."""
    port = free_port()
    files = TlsFiles(certs / "ca.crt", certs / "worker.pem", certs / "worker.key")
    server = serve(f"127.0.0.1:{port}", tmp_path, credentials=server_credentials(files))
    yield f"127.0.0.1:{port}", tmp_path
    server.stop(0)


def _ping(channel: grpc.Channel, timeout: float = 5.0) -> pb.Ack:
    return pb_grpc.AttackServiceStub(channel).Ping(pb.PingRequest(), timeout=timeout)


def test_the_certificates_name_the_compose_services_and_the_pool_is_a_client(certs: Path):
    def ext(name: str, what: str) -> str:
        return subprocess.run(
            ["openssl", "x509", "-in", str(certs / name), "-noout", "-ext", what], capture_output=True, text=True, check=True
        ).stdout

    sans = ext("worker.pem", "subjectAltName")
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:attack-worker-0", "DNS:attack-worker-7"):
        assert name in sans, sans
    assert "attack-worker-8" not in sans  # LEAKBED_CERT_WORKERS defaults to 8
    assert "TLS Web Client Authentication" in ext("pool.pem", "extendedKeyUsage")
    assert (certs / "worker.key").stat().st_mode & 0o077 == 0 and (certs / "pool.key").stat().st_mode & 0o077 == 0


def _deliver(address: str, root: Path, tls: TlsFiles | None) -> AttackPool:
    knowledge, arrays, keys = _knowledge()
    dim = sum(arrays[k].size for k in keys)
    pool = AttackPool(
        knowledge, str(root), workers=1, queue_size=8, submit_timeout=30, addresses=[address], retry_seconds=20,
        run_id="r", tls=tls,
    )
    try:
        pool.submit_round(RoundSnapshot(1, arrays, TRAIN))
        pool.submit_updates(_anon(1, 3, dim, np.random.default_rng(0)))
        assert pool.drain(120)
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    return pool


def test_a_pool_with_the_runs_certificate_delivers_rounds_updates_and_fits(tls_worker, certs: Path):
    address, root = tls_worker
    pool = _deliver(address, root, pool_files(certs))
    s = pool.stats
    assert pool.tls and not pool.local
    assert (s.tapped, s.analysed, s.failed, s.rounds_analysed) == (3, 3, 0, 1) and not s.errors, s.errors
    assert s.fit_seconds["knn"] == s.fit_seconds["knn"]  # not NaN: fitted
    assert len(UpdateStore(root / "r").read_result("knn")["ids"]) == 3


@pytest.mark.parametrize("client", ["plaintext", "no-client-certificate", "other-ca-certificate", "trusts-other-ca"])
def test_nobody_else_can_submit_to_a_worker_or_read_from_it(tls_worker, certs: Path, other: Path, client: str):
    address, root = tls_worker
    if client == "plaintext":
        channel = grpc.insecure_channel(address)
    elif client == "no-client-certificate":  # server-side TLS only, as a pool without the run's certificate
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes()))
    else:
        ca = certs if client == "other-ca-certificate" else other
        mine = other if client == "other-ca-certificate" else certs
        creds = grpc.ssl_channel_credentials(
            (ca / "ca.crt").read_bytes(), (mine / "pool.key").read_bytes(), (mine / "pool.pem").read_bytes()
        )
        channel = grpc.secure_channel(address, creds)
    with channel, pytest.raises(grpc.RpcError) as err:
        _ping(channel)
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert not (root / "r").exists()


@pytest.mark.slow  # a real gateway and sandboxed worker process: seconds
def test_leakbed_attack_worker_serves_mutual_tls_with_the_attack_code_sandboxed(tmp_path: Path, certs: Path):
    """The real process: a pool holding the run's certificate gets its work done by the sandboxed worker
    behind the gateway; a client without a certificate is refused."""
    port = free_port()
    store = tmp_path / "store"
    store.mkdir()
    argv = [sys.executable, "-m", "workers.remote", "--port", str(port), "--store", str(store), "--sandbox", "on"]
    argv += ["--ssl-certfile", str(certs / "worker.pem"), "--ssl-keyfile", str(certs / "worker.key")]
    argv += ["--ssl-ca-certfile", str(certs / "ca.crt"), "--log-dir", str(tmp_path / "logs")]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        address = f"localhost:{port}"
        pool = _deliver(address, store, pool_files(certs))
        s = pool.stats
        assert (s.analysed, s.failed) == (3, 0) and not s.errors and s.fit_seconds["knn"] == s.fit_seconds["knn"], s.errors
        worker_log = (tmp_path / "logs" / "worker.log").read_text()
        assert "uid 65534, pid 2)" in worker_log or "pid 2)" in worker_log, worker_log  # in its sandbox's own PID namespace
        creds = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes())
        with grpc.secure_channel(address, creds) as unauthenticated, pytest.raises(grpc.RpcError):
            _ping(unauthenticated)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "mutual TLS, sandboxed worker at unix:" in out, out
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-f", str(store)], capture_output=True).returncode == 0:
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", str(store)], capture_output=True).returncode == 1, "the sandboxed worker outlived it"


def test_tls_settings_go_together_and_missing_files_are_refused_before_the_run(tmp_path: Path):
    from leakbed.cli import preflight
    from server.run_parts import RunParts

    with pytest.raises(ConfigError, match="go together"):
        tiny_config(f"workers.tls_root_cert={tmp_path / 'ca.crt'}")
    missing = [f"workers.tls_root_cert={tmp_path / 'ca.crt'}", f"workers.tls_cert={tmp_path / 'p.pem'}"]
    remote = tiny_config('workers.addresses=["10.0.0.5:7070"]', *missing, f"workers.tls_key={tmp_path / 'p.key'}")
    with pytest.raises(ValueError, match="workers.tls_root_cert .*no such file"):
        preflight(remote)
    with pytest.raises(ValueError, match="workers.tls_root_cert .*no such file"):
        RunParts.pool(SimpleNamespace(cfg=remote), addresses=remote.workers.addresses)
