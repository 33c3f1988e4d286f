"""A run's memory is estimated from its config before anything starts, and a run that cannot fit is refused in one
line naming what to lower (``server.memory_estimate``); the server's evaluation runs on the cores the attack lanes
leave free (``server.run_parts.evaluation_threads``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import leakbed.cli as cli
from leakbed.commands import experiment
from leakbed.core.config import ConfigError, load_config
from leakbed.core.data import federation
from leakbed.core.processes import MARK
from leakbed.preflight import declarations
from leakbed.server import memory_estimate, run_parts
from leakbed.server.memory_estimate import check_memory, estimate
from tests.conftest import REPO, tiny_config

GIB = 2**30


def _parts(cfg):
    return cfg, federation(cfg, cfg.split.priors[0]), declarations(cfg)


def test_the_quickstart_fits_a_laptop():
    cfg, fed, decls = _parts(load_config(REPO / "leakbed/configs/quickstart.toml"))
    est = check_memory(cfg, fed, decls, available=8 * GIB, cpus=2)
    assert est is not None
    # measured (benchmarks/README.md, 2 CPUs): 3.5 GiB of PSS at the run's peak; the estimate errs on the high side
    assert 3.4 * 1024 < est.total_mib < 5 * 1024, est.line()
    assert est.part("ServerApp").mib < 1024


def test_a_run_that_cannot_fit_is_refused_naming_what_to_lower():
    cfg, fed, decls = _parts(tiny_config())
    with pytest.raises(ConfigError) as err:  # one ClientApp actor per CPU of a 256-core machine
        check_memory(cfg, fed, decls, available=16 * GIB, cpus=256)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("memory: this run needs about "), msg
    assert "16.0 GiB available" in msg and "lower simulation.client_cpus" in msg, msg
    fewer = cfg.model_copy(update={"simulation": cfg.simulation.model_copy(update={"client_cpus": 64})})
    assert check_memory(fewer, fed, decls, available=16 * GIB, cpus=256) is not None  # as the line says


def test_a_language_models_evaluation_counts_one_batch_of_logits(tmp_path):
    from benchmarks.text_workload import write

    table = tmp_path / "text.jsonl"
    write(table, authors=4, sentences=700)
    sets = ["data.source='table'", f"data.path='{table}'", "data.seq_len=32", "data.vocab_size=2000",
            "workers.count=1", 'split.priors=["random"]']
    server = {}
    for share in (0.5, 0.8):  # 700 and 1,120 test windows: more than one batch of 512 either way
        cfg, fed, decls = _parts(tiny_config(*sets, f"data.test_fraction={share}"))
        server[share] = estimate(cfg, fed, decls, cpus=2).part("ServerApp").mib
    assert server[0.5] == pytest.approx(server[0.8], abs=1)  # one batch: 512 x 32 x 2000 float32 = 125 MiB
    assert server[0.5] > memory_estimate.SERVER + 125


def test_the_launcher_refuses_before_anything_starts(tmp_path, monkeypatch, capsys):
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(experiment, "run_experiment", started)
    monkeypatch.delenv(MARK, raising=False)
    monkeypatch.setattr(memory_estimate.psutil, "virtual_memory", lambda: SimpleNamespace(available=GIB // 2))
    out = tmp_path / "out"
    sets = ["data.synthetic.users=6", "data.synthetic.examples_per_user=40", "data.synthetic.image_size=8",
            "fl.rounds=1", "workers.count=1", "workers.sandbox='off'"]
    code = cli.main(["run", "--out", str(out), *(a for s in sets for a in ("--set", s))])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and err.startswith("leakbed: error: memory: this run needs about "), err
    assert "0.5 GiB available; lower " in err, err
    assert not out.exists()


def test_a_process_a_launcher_started_does_not_check_again(monkeypatch):
    cfg, fed, decls = _parts(tiny_config())
    monkeypatch.setattr(memory_estimate.psutil, "virtual_memory", lambda: SimpleNamespace(available=0))
    monkeypatch.setenv(MARK, "a-run")  # the ServerApp of a run that `leakbed run` checked before starting it
    assert check_memory(cfg, fed, decls) is None
    monkeypatch.delenv(MARK)
    monkeypatch.setenv(memory_estimate.SKIP_ENV, "0")
    assert check_memory(cfg, fed, decls) is None
    monkeypatch.delenv(memory_estimate.SKIP_ENV)
    with pytest.raises(ConfigError):
        check_memory(cfg, fed, decls)


def test_evaluation_leaves_a_core_to_each_local_attack_lane(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(run_parts.os, "sched_getaffinity", lambda _: set(range(2)), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert run_parts.evaluation_threads(tiny_config("workers.count=2"), cpu) == 1
    assert run_parts.evaluation_threads(tiny_config("workers.count=1"), cpu) == 1
    remote = tiny_config("workers.count=2", "workers.addresses=['unix:/tmp/w.sock']")
    assert run_parts.evaluation_threads(remote, cpu) == 2  # the lanes run elsewhere
    monkeypatch.setattr(run_parts.os, "sched_getaffinity", lambda _: set(range(16)), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 16)
    assert run_parts.evaluation_threads(tiny_config("workers.count=2"), cpu) == 14


def test_torch_threads_are_restored_after_the_evaluation():
    before = torch.get_num_threads()
    with run_parts.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
