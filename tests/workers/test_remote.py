"""A remote attack worker (``workers.remote``, ``leakbed attack-worker``): a gateway that starts one sandbox per lane on
its host and forwards the lane's frames unchanged; it refuses bad options before it starts and bad requests in one
line. Mutual TLS is in ``test_tls.py``; a pool running through a worker in ``test_pool.py``."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from leakbed.cli import main as leakbed_main
from leakbed.workers import remote, transport
from leakbed.workers.hosts import LocalHost
from leakbed.workers.introspect import Introspector
from leakbed.workers.remote import Gateway
from leakbed.workers.remote import main as remote_main
from leakbed.workers.sandbox import Limits, available
from leakbed.workers.transport import pb, pb_grpc
from tests.workers import kit

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")


def serve(address: str, store: Path, work: Path, credentials: grpc.ServerCredentials | None = None,
          limits: Limits | None = None) -> tuple[grpc.Server, Gateway, int]:
    """A gateway in this process, as ``leakbed attack-worker`` runs it: (server, gateway, bound port)."""
    host = LocalHost(store, work / "logs", limits or Limits(), upstream_root=work / "upstream", log_cap=1 << 20,
                     max_reply=1 << 30)
    gateway = Gateway(host, Introspector(limits or Limits(), cache=work / "cache"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=transport.GRPC_OPTIONS)
    pb_grpc.add_LaneServiceServicer_to_server(gateway, server)
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    server.start()
    return server, gateway, port


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote") / "store"
    kit.fill_store(root / "r")
    return root


@pytest.fixture
def worker(tmp_path: Path, stores: Path) -> Iterator[tuple[pb_grpc.LaneServiceStub, Gateway, Path]]:
    sock_dir = Path(tempfile.mkdtemp(prefix="lkg-", dir="/tmp"))  # a socket path must fit 107 bytes
    server, gateway, _ = serve(f"unix:{sock_dir}/w.sock", stores, tmp_path)
    channel = grpc.insecure_channel(f"unix:{sock_dir}/w.sock")
    try:
        yield pb_grpc.LaneServiceStub(channel), gateway, tmp_path
    finally:
        channel.close()
        gateway.close()
        server.stop(0)
        shutil.rmtree(sock_dir, ignore_errors=True)


def start(stub: pb_grpc.LaneServiceStub, run_id: str = "r", **spec) -> pb.LaneRef:
    doc = {"key": f"{run_id}/knn", "kind": "attack", "attack": "knn", "output": "knn", "params": {"k": 3}, **spec}
    return stub.Start(pb.LaneStart(run=transport.run_msg(run_id), spec_json=json.dumps(doc)), timeout=120)


def test_a_lane_through_the_gateway_answers_and_stops(worker):
    stub, gateway, work = worker
    ref = start(stub)
    assert ref.lane_id and 0 < ref.seconds < 60 and len(gateway._lanes) == 1
    reply = stub.Call(pb.LaneCall(lane_id=ref.lane_id, header_json=json.dumps({"op": "ping"}), deadline=30), timeout=60)
    assert reply.failure == "" and json.loads(reply.header_json)["pid"] == 1  # pid 1: its own sandbox on that host
    reply = stub.Call(pb.LaneCall(lane_id=ref.lane_id, header_json=json.dumps({"op": "round", "round": 99}), deadline=30),
                      timeout=60)
    assert reply.failure == "task" and reply.detail.startswith("attack 'knn' said: \"FileNotFoundError: ")
    assert "\n" not in reply.detail and reply.header_json == "" and reply.body == b""
    stub.Stop(pb.LaneRef(lane_id=ref.lane_id), timeout=30)
    assert gateway._lanes == {} and (work / "logs" / "r-knn.log").is_file()
    with pytest.raises(grpc.RpcError) as err:  # a stopped lane is gone
        stub.Call(pb.LaneCall(lane_id=ref.lane_id, header_json=json.dumps({"op": "ping"}), deadline=5), timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("run_id", ["../x", "a/b", "/", "..", "", ".hidden", "x" * 145, "a\\b", "../../etc"])
def test_a_run_id_that_is_not_one_folder_name_is_refused(worker, run_id):
    stub, gateway, work = worker
    with pytest.raises(grpc.RpcError) as err:
        start(stub, run_id)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad run id" in err.value.details()
    assert gateway._lanes == {} and not (work / "logs").exists()


@pytest.mark.parametrize(
    ("spec", "says"),
    [({"output": "../escape"}, "bad run id"), ({"key": None, "kind": None}, "bad lane"), ({"peers": [1]}, "bad lane")],
    ids=["output", "no-kind", "peers"],
)
def test_a_malformed_lane_is_refused_before_any_sandbox(worker, spec, says):
    stub, gateway, work = worker
    doc = {"key": "r/knn", "kind": "attack", "attack": "knn", "output": "knn", **spec}
    if spec.get("kind", "x") is None:
        del doc["kind"]
    with pytest.raises(grpc.RpcError) as err:
        stub.Start(pb.LaneStart(run=transport.run_msg("r"), spec_json=json.dumps(doc)), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in err.value.details()
    assert gateway._lanes == {}


def test_a_lane_that_cannot_open_is_refused_and_more_lanes_than_allowed_too(worker, monkeypatch):
    stub, gateway, work = worker
    with pytest.raises(grpc.RpcError) as err:  # no store "nope" under the worker's root: the lane cannot open
        start(stub, "nope")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and err.value.details().startswith("the lane could not start")
    monkeypatch.setattr(remote, "MAX_LANES", 1)
    ref = start(stub)
    with pytest.raises(grpc.RpcError) as err:
        start(stub)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and len(gateway._lanes) == 1
    stub.Stop(pb.LaneRef(lane_id=ref.lane_id), timeout=30)


def test_an_unknown_lane_is_not_found(worker):
    stub, _, _ = worker
    for call in (lambda: stub.Call(pb.LaneCall(lane_id="x", header_json="{}", deadline=1), timeout=30),
                 lambda: stub.Upstream(pb.LaneUpstream(lane_id="x", name="knn", npz=b""), timeout=30)):
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    stub.Stop(pb.LaneRef(lane_id="x"), timeout=30)  # stopping what is not there is nothing


def test_the_worker_answers_the_pools_introspection(worker, decls, decls_cache):
    """``Declare``: the declarations, introspected on the worker's host (here from the run's cache, so without a new
    sandbox); an unknown name comes back as that name's error, which the pool's side reports in one line."""
    stub, gateway, work = worker
    gateway._introspector.cache = decls_cache
    doc = json.loads(stub.Declare(pb.DeclareRequest(names=["knn", "svm"]), timeout=300).json)
    assert doc["errors"] == {} and sorted(doc["declarations"]) == ["knn", "svm"] and gateway._introspector.misses == 0
    assert doc["declarations"]["knn"] == decls["knn"].model_dump(mode="json")
    bad = json.loads(stub.Declare(pb.DeclareRequest(names=["knnn"]), timeout=60).json)
    assert bad["declarations"] == {} and bad["errors"]["knnn"].startswith("unknown attack 'knnn'; did you mean 'knn'?")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--port", "5", "--store", "{tmp}/missing", "--insecure"], "no such folder"),
        (["--port", "70000", "--store", "{tmp}", "--insecure"], "--port must be"),
        (["--port", "5", "--store", "{tmp}", "--insecure", "--memory-mb", "1"], "--memory-mb 64..1048576"),
        (["--port", "5", "--store", "{tmp}"], "mutual TLS"),  # neither TLS files nor an explicit --insecure
        (["--port", "5", "--store", "{tmp}", "--ssl-certfile", "{tmp}/c", "--ssl-keyfile", "{tmp}/k"], "mutual TLS"),
        (["--port", "5", "--store", "{tmp}", "--ssl-certfile", "{tmp}/c", "--ssl-keyfile", "{tmp}/k",
          "--ssl-ca-certfile", "{tmp}/a"], "cannot read the TLS files"),
        (["--port", "5", "--store", "{tmp}", "--insecure", "--ssl-certfile", "{tmp}/c"], "exclude each other"),
    ],
    ids=["store", "port", "memory", "no-tls", "tls-incomplete", "tls-unreadable", "insecure-and-tls"],
)
def test_the_worker_refuses_bad_options_in_one_line_before_starting(tmp_path, capsys, argv, says):
    assert remote_main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and err.startswith("attack-worker: ")


def test_leakbed_attack_worker_passes_its_options_through(tmp_path, monkeypatch):
    """``leakbed attack-worker`` is ``workers.remote``; ``--warm`` is still accepted (lanes warm up on their own)."""
    seen: list = []
    monkeypatch.setattr(remote, "run", lambda args: seen.append(args) or 0)
    assert leakbed_main(["attack-worker", "--socket", str(tmp_path / "w.sock"), "--store", str(tmp_path), "--warm",
                         "--sandbox", "on"]) == 0
    assert seen[0].warm and seen[0].socket == str(tmp_path / "w.sock") and seen[0].sandbox == "on"


def test_where_no_sandbox_can_start_a_third_party_lane_is_refused(tmp_path: Path, stores: Path) -> None:
    """``--sandbox auto`` on a worker without bubblewrap: a lane of a plugin's attack is refused in one line (a built-in's
    lane would run unconfined, as the worker's banner says)."""

    class Context:
        def abort(self, code: grpc.StatusCode, details: str) -> None:
            raise RuntimeError(f"{code.name}: {details}")

    host = LocalHost(stores, tmp_path / "logs", None, upstream_root=tmp_path / "upstream", log_cap=1 << 20, max_reply=1 << 20)
    gateway = Gateway(host, Introspector(None, cache=tmp_path / "cache"), unconfined="bwrap not found")
    spec = {"key": "r/fedavg-inversion", "kind": "attack", "attack": "fedavg-inversion", "output": "fedavg-inversion"}
    with pytest.raises(RuntimeError) as err:
        gateway.Start(pb.LaneStart(run=transport.run_msg("r"), spec_json=json.dumps(spec)), Context())
    assert str(err.value).startswith("FAILED_PRECONDITION: attack 'fedavg-inversion' comes from a third-party distribution "
                                     "and no sandbox can start on this worker (bwrap not found): install bubblewrap")
    assert gateway._lanes == {}
