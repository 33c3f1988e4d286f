"""The gRPC attack service: transport round trip, at-least-once de-duplication, run-id guard."""

import grpc
import numpy as np
import pytest
from workers.inside.worker import serve

from core.records import AnonymousUpdate, RoundSnapshot
from core.store import UpdateStore
from workers import transport
from workers.remote import main as remote_main
from workers.transport import pb, pb_grpc


def _update(uid: str, rnd: int = 1, full: bool = False) -> AnonymousUpdate:
    rng = np.random.default_rng(int(uid, 16))
    arrays = {"fc.weight": rng.normal(size=(3, 4)).astype(np.float32), "fc.bias": np.zeros(3, np.float64)} if full else None
    return AnonymousUpdate(uid, rnd, rng.normal(size=5).astype(np.float32), 7, arrays)


def test_records_survive_the_wire_exactly():
    run = transport.run_msg("r")
    ups = [_update("0a", full=True), _update("0b", full=True)]
    back = transport.updates_of(pb.UpdatesRequest.FromString(transport.updates_request(run, "b1", ups).SerializeToString()))
    for a, b in zip(ups, back, strict=True):
        assert (a.update_id, a.round, a.num_examples) == (b.update_id, b.round, b.num_examples)
        np.testing.assert_array_equal(a.vector, b.vector)
        assert b.vector.dtype == np.float32 and b.arrays["fc.bias"].dtype == np.float64
        np.testing.assert_array_equal(a.arrays["fc.weight"], b.arrays["fc.weight"])
    assert transport.updates_of(transport.updates_request(run, "b", [_update("0c")]))[0].arrays is None
    snap = RoundSnapshot(3, {"w": np.arange(6.0).reshape(2, 3)}, {"lr": 0.1, "optimizer": "sgd", "epochs": 1})
    got = transport.snapshot_of(transport.round_request(run, snap))
    assert got.round == 3 and got.train_config == snap.train_config
    np.testing.assert_array_equal(got.arrays["w"], snap.arrays["w"])


@pytest.fixture
def two_workers(tmp_path):
    sockets = [f"unix:{tmp_path}/w{i}.sock" for i in range(2)]
    servers = [serve(s, tmp_path) for s in sockets]
    channels = [grpc.insecure_channel(s) for s in sockets]
    yield [pb_grpc.AttackServiceStub(c) for c in channels]
    for c in channels:
        c.close()
    for s in servers:
        s.stop(0)


def test_a_redelivered_batch_is_filed_once_whichever_worker_gets_it(tmp_path, two_workers):
    a, b = two_workers
    run = transport.run_msg("run1")
    batch = transport.updates_request(run, "b1", [_update("01"), _update("02")])
    first = a.Updates(batch, timeout=30)
    again = b.Updates(batch, timeout=30)  # the ack of `first` was "lost": the pool retries on another worker
    overlap = b.Updates(transport.updates_request(run, "b2", [_update("02"), _update("03")]), timeout=30)
    assert (first.stored, first.duplicates, first.error) == (2, 0, "")
    assert (again.stored, again.duplicates) == (0, 2)
    assert (overlap.stored, overlap.duplicates) == (1, 1)
    ids = UpdateStore(tmp_path / "run1").read_anon()["ids"]
    assert sorted(map(str, ids)) == ["01", "02", "03"]


@pytest.mark.parametrize("run_id", ["../x", "a/b", "/", "..", "", ".hidden", "x" * 65, "a\\b", "../../etc"])
def test_a_run_id_that_is_not_one_folder_name_is_refused(tmp_path, two_workers, run_id):
    ack = two_workers[0].Updates(transport.updates_request(transport.run_msg(run_id), "b", [_update("01")]), timeout=30)
    assert "ValueError" in ack.error and "bad run id" in ack.error and ack.stored == 0
    assert not list(tmp_path.rglob("*.npz")) and not (tmp_path.parent / "x").exists()  # nothing filed, in or beside the root


def test_a_failing_task_is_acknowledged_with_its_error(tmp_path, two_workers):
    run = transport.run_msg("s")  # no knowledge.json in <root>/s
    ack = two_workers[1].Fit(pb.FitRequest(run=run, attack="knn"), timeout=30)
    assert "FileNotFoundError" in ack.error and ack.worker_pid > 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--port", "5", "--store", "{tmp}/missing", "--insecure"], "no such folder"),
        (["--port", "70000", "--store", "{tmp}", "--insecure"], "--port must be"),
        (["--port", "5", "--store", "{tmp}"], "mutual TLS"),  # neither TLS files nor an explicit --insecure
        (["--port", "5", "--store", "{tmp}", "--ssl-certfile", "{tmp}/c", "--ssl-keyfile", "{tmp}/k"], "mutual TLS"),
        (
            ["--port", "5", "--store", "{tmp}", "--ssl-certfile", "{tmp}/c", "--ssl-keyfile", "{tmp}/k", "--ssl-ca-certfile"]
            + ["{tmp}/a"],
            "cannot read the TLS files",
        ),
    ],
)
def test_remote_worker_refuses_bad_input_before_starting(tmp_path, capsys, argv, says):
    assert remote_main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


@pytest.mark.slow  # a real worker process that imports torch twice over: 6 s
def test_a_warm_worker_loads_torchs_lazy_parts_before_its_first_task(tmp_path):
    """``--warm`` (what a run's pool and the deployments pass): the worker imports torch._dynamo, which
    torch.func and torch.optim otherwise import inside the first shadow round, while it waits for tasks;
    the CLI passes the flag through, and a pool asked to warm spawns its workers with it."""
    import subprocess
    import sys
    import threading
    import time

    from workers.worker_process import WorkerProcess

    from leakbed.cli import main as leakbed_main

    code = "import sys, workers.inside.worker as w; sys.exit(w.main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--socket", str(tmp_path / "w.sock"), "--store", str(tmp_path), "--warm"],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()  # a silent worker must not hang the test
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("warmed up in" in line for line in lines):
            time.sleep(0.1)
        assert any("warmed up in" in line for line in lines), lines
    finally:
        proc.terminate()
        proc.wait(10)

    seen: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("workers.remote.run", lambda args: seen.append(args) or 0)
        assert leakbed_main(["attack-worker", "--port", "9", "--store", str(tmp_path), "--warm", "--insecure"]) == 0
    assert seen and seen[0].warm

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(WorkerProcess, "_spawn", lambda self: None)
        assert "--warm" in WorkerProcess(0, tmp_path, tmp_path / "l", None, warm=True).worker
        assert "--warm" not in WorkerProcess(0, tmp_path, tmp_path / "l", None).worker
