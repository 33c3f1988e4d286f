"""GPU paths: fractional GPUs per Ray actor reach Ray's backend config; the scale benchmark passes
them on and refuses them where no CUDA device exists; the compose GPU overlay reserves devices."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks import scale
from leakbed import compose
from leakbed.core.config import load_config
from leakbed.simulate import federation_config


def test_client_gpus_reach_the_simulation_federation_config() -> None:
    """``flwr run --federation-config``: Flower's Simulation Runtime sizes each ClientApp actor from these."""
    cfg = load_config(None, ["simulation.client_gpus=0.25", "simulation.client_cpus=2"])
    fed = federation_config(cfg, 10)
    assert fed["num-supernodes"] == 10 and fed["client-resources-num-cpus"] == 2 and fed["client-resources-num-gpus"] == 0.25
    assert federation_config(load_config(None), 3)["client-resources-num-gpus"] == 0.0


def test_scale_defaults_and_gpu_overrides_become_cohort_arguments() -> None:
    args, rest = scale.parse(["--client-gpus", "0.5", "--device", "cuda", "--seed", "3"])
    assert scale.sizes(args.users) == [100, 300, 1000]
    argv = scale.cohort_argv(1000, args, rest, Path("/tmp/scale"))
    assert argv[:8] == ["--users", "1000", "--fraction", "0.1", "--rounds", "5", "--out", "/tmp/scale"]
    assert "simulation.client_gpus=0.5" in argv and "device=cuda" in argv
    assert argv[-2:] == ["--seed", "3"]  # anything else goes to benchmarks.cohort unchanged
    cfg = load_config(None, [a for a in argv if "=" in a])
    assert cfg.simulation.client_gpus == 0.5 and cfg.device == "cuda"


def test_scale_refuses_gpus_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the GPU run would start")
    assert scale.main(["--client-gpus", "0.5", "--users", "2"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and err.count("\n") <= 2
    assert scale.check_gpus(scale.parse([])[0]) is None


def test_gpu_overlay_runs_clients_on_the_cuda_image() -> None:
    gpu = yaml.safe_load(compose.render("gpu", supernodes=2, workers=1))["services"]
    for name, svc in gpu.items():
        assert name.startswith("clientapp-")
        assert svc["image"].startswith("localhost/leakbed-app-cuda:") and "build" not in svc  # `leakbed compose build --gpu`
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
