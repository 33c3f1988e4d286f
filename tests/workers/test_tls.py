"""Mutual TLS between the pool and a remote attack worker (``workers.tls``): a worker serves only a pool holding a
certificate of the run's CA (``leakbed/deploy/certs.sh``'s ``pool``), and the pool trusts only a worker the CA signed. A pool
with the run's certificate runs its lanes through the worker; a plaintext client, one without a certificate, one with
another CA's certificate and one trusting another CA reach nothing. Missing files are refused before a run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from leakbed.core.config import ConfigError
from leakbed.core.processes import alive, descendants
from leakbed.workers.hosts import RemoteHost
from leakbed.workers.lane import LaneSpec
from leakbed.workers.sandbox import available
from leakbed.workers.tls import TlsFiles, server_credentials, tls_files
from leakbed.workers.transport import pb, pb_grpc
from tests.conftest import REPO, tiny_config
from tests.workers import kit
from tests.workers.test_pool import feed, make_pool, outputs, prefill_shadow
from tests.workers.test_remote import serve

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")


def _certs(out: Path) -> Path:
    made = subprocess.run(["bash", str(REPO / "leakbed" / "deploy" / "certs.sh"), str(out), "0"], capture_output=True, text=True,
                          timeout=120)
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
def tls_worker(tmp_path: Path, certs: Path) -> Iterator[tuple[str, Path, object]]:
    """A gateway serving over mutual TLS on 127.0.0.1 over ``tmp_path/store``: (address, store root, gateway)."""
    store = tmp_path / "store"
    store.mkdir()
    files = TlsFiles(certs / "ca.crt", certs / "worker.pem", certs / "worker.key")
    server, gateway, port = serve("127.0.0.1:0", store, tmp_path / "worker", credentials=server_credentials(files))
    try:
        yield f"localhost:{port}", store, gateway
    finally:
        gateway.close()
        server.stop(0)


def test_the_certificates_name_the_compose_services_and_the_pool_is_a_client(certs: Path):
    def ext(name: str, what: str) -> str:
        return subprocess.run(["openssl", "x509", "-in", str(certs / name), "-noout", "-ext", what], capture_output=True,
                              text=True, check=True).stdout

    sans = ext("worker.pem", "subjectAltName")
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:attack-worker-0", "DNS:attack-worker-7"):
        assert name in sans, sans
    assert "attack-worker-8" not in sans  # LEAKBED_CERT_WORKERS defaults to 8
    assert "TLS Web Client Authentication" in ext("pool.pem", "extendedKeyUsage")
    assert (certs / "worker.key").stat().st_mode & 0o077 == 0 and (certs / "pool.key").stat().st_mode & 0o077 == 0


@pytest.mark.long
def test_a_pool_with_the_runs_certificate_runs_its_lanes_through_the_worker(tmp_path, tls_worker, certs, decls):
    address, store, gateway = tls_worker
    pool = make_pool(tmp_path, decls, ("knn",), addresses=[address], tls=pool_files(certs), sandbox=None, shadow=False)
    prefill_shadow(pool)
    try:
        assert pool.tls and not pool.local and pool.sandboxed and pool._root == store.resolve().parent / "store"
        feed(pool)
        assert pool.drain(60)
        pool.fit(["knn"], timeout=120)
    finally:
        pool.close()
    s = pool.stats
    assert (s.tapped, s.analysed, s.failed) == (6, 6, 0) and s.fitted("knn") and not s.errors, s.errors
    assert s.tasks_by_worker == {"r/knn": 1} and outputs(tmp_path, "knn")["scores"].shape == (6, 6)
    assert s.tasks_by_host == {f"remote {address}": 1}  # where it ran: the worker, not here
    assert (tmp_path / "worker" / "logs" / "r-knn.log").is_file() and gateway._lanes == {}  # ran there, stopped


@pytest.mark.parametrize("client", ["plaintext", "no-client-certificate", "other-ca-certificate", "trusts-other-ca"])
def test_nobody_else_can_call_the_worker(tls_worker, certs: Path, other: Path, client: str):
    address, store, gateway = tls_worker
    if client == "plaintext":
        channel = grpc.insecure_channel(address)
    elif client == "no-client-certificate":  # server-side TLS only, as a pool without the run's certificate
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes()))
    else:
        ca = certs if client == "other-ca-certificate" else other
        mine = other if client == "other-ca-certificate" else certs
        creds = grpc.ssl_channel_credentials((ca / "ca.crt").read_bytes(), (mine / "pool.key").read_bytes(),
                                             (mine / "pool.pem").read_bytes())
        channel = grpc.secure_channel(address, creds)
    stub = pb_grpc.LaneServiceStub(channel)
    with channel:
        with pytest.raises(grpc.RpcError) as err:
            stub.Ping(pb.Empty(), timeout=5)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        with pytest.raises(grpc.RpcError):
            stub.Start(pb.LaneStart(spec_json='{"key": "r/knn", "kind": "attack", "attack": "knn"}'), timeout=5)
        with pytest.raises(grpc.RpcError):
            stub.Declare(pb.DeclareRequest(names=["knn"]), timeout=5)
    assert gateway._lanes == {} and gateway._introspector.misses == 0 and list(store.iterdir()) == []


def test_the_pools_channel_reaches_a_worker_the_ca_signed(tls_worker, certs):
    """The control: the same calls with the run's pool certificate are answered."""
    address, _, _ = tls_worker
    ca, cert, key = pool_files(certs).read()
    with grpc.secure_channel(address, grpc.ssl_channel_credentials(ca, key, cert)) as channel:
        assert pb_grpc.LaneServiceStub(channel).Ping(pb.Empty(), timeout=30) == pb.Empty()


@pytest.mark.slow  # the real process with its sandboxed lanes: seconds
def test_leakbed_attack_worker_serves_mutual_tls_with_the_lanes_sandboxed(tmp_path, certs, decls):
    """The real ``leakbed attack-worker``: a pool holding the run's certificate gets its fit done in a sandbox on the
    worker's host; a client without a certificate is refused; on SIGTERM it ends with no lane left behind."""
    from leakbed.core.processes import free_port

    port = free_port()
    store = tmp_path / "store"
    store.mkdir()
    argv = [str(Path(sys.executable).parent / "leakbed"), "attack-worker", "--port", str(port), "--store", str(store),
            "--sandbox", "on", "--ssl-certfile", str(certs / "worker.pem"), "--ssl-keyfile", str(certs / "worker.key"),
            "--ssl-ca-certfile", str(certs / "ca.crt"), "--log-dir", str(tmp_path / "logs")]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pool = make_pool(tmp_path, decls, ("knn",), addresses=[f"localhost:{port}"], tls=pool_files(certs), sandbox=None,
                         shadow=False)
        prefill_shadow(pool)
        try:
            feed(pool)
            pool.fit(["knn"], timeout=120)
        finally:
            pool.close()
        s = pool.stats
        assert (s.analysed, s.failed) == (6, 0) and s.fitted("knn") and not s.errors, s.errors
        assert (tmp_path / "logs" / "r-knn.log").is_file() and outputs(tmp_path, "knn")["scores"].shape == (6, 6)
        creds = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes())
        with grpc.secure_channel(f"localhost:{port}", creds) as unauthenticated, pytest.raises(grpc.RpcError):
            pb_grpc.LaneServiceStub(unauthenticated).Ping(pb.Empty(), timeout=5)
        host = RemoteHost(f"localhost:{port}", pool_files(certs), 1 << 20)  # a lane left open when the worker stops
        host.lane(LaneSpec(key="r/svm", kind="attack", attack="svm", output="svm"), "r").start()
        lanes = descendants(proc.pid)
        assert len(lanes) == (3 if os.geteuid() == 0 else 2)  # its bwrap, the sandbox's process (and as root, the
        # sandbox's guard: workers.guard)
        host.close()
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "(mutual TLS, sandboxed lanes" in out, out
    assert kit.gone_within(lanes, 5.0), [p for p in lanes if alive(p)]


def test_tls_settings_go_together_and_missing_files_are_refused_before_the_run(tmp_path: Path):
    from leakbed.preflight import preflight

    with pytest.raises(ConfigError, match="go together"):
        tiny_config(f"workers.tls_root_cert={tmp_path / 'ca.crt'}")
    files = [f"workers.tls_root_cert={tmp_path / 'ca.crt'}", f"workers.tls_cert={tmp_path / 'p.pem'}",
             f"workers.tls_key={tmp_path / 'p.key'}"]
    remote = tiny_config('workers.addresses=["10.0.0.5:7070"]', *files)
    with pytest.raises(ValueError, match=r"^workers.tls_root_cert = '.*ca.crt': no such file \(mutual TLS"):
        tls_files(remote.workers)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="workers.tls_root_cert = .*no such file"):
        preflight(remote)
    assert time.monotonic() - t0 < 5  # refused first, before any introspection or federation
    for name in ("ca.crt", "p.pem", "p.key"):
        (tmp_path / name).write_text("x")
    assert tls_files(remote.workers) == TlsFiles(tmp_path / "ca.crt", tmp_path / "p.pem", tmp_path / "p.key")
    assert tls_files(tiny_config().workers) is None
