"""The ``fedavg-inversion`` plugin (plugins/leakbed-fedavg-inversion, Dimitrov et al. 2022): its simulation of a
device's local training is exact, its per-step label estimate recovers the labels, and the headline ordering holds
at a small scale on FEMNIST writers: through 5 local epochs it recovers the device's images where Inverting
Gradients, reading Δw as one gradient, and other people's images (chance) do not. A real run scores it sandboxed."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from leakbed_fedavg.invert import Settings, invert
from leakbed_fedavg.labels import estimate_counts, rounded_counts, step_weights
from leakbed_fedavg.schedule import schedule
from leakbed_fedavg.unroll import simulated_update

from leakbed.attacks.inverting_gradients import ig_reconstruct
from leakbed.core.config import load_config
from leakbed.core.data import federation
from leakbed.core.models import build_model
from leakbed.core.training import TrainConfig, batch_indices, local_update
from leakbed.referee.score_reconstruction import RECOVERED_PSNR, label_accuracy, psnr_matched
from tests.conftest import REPO, SHARED_DATA

PLUGIN = REPO / "plugins" / "leakbed-fedavg-inversion"
FEMNIST = SHARED_DATA / "femnist"


@pytest.mark.parametrize(("n", "b", "e", "s"), [(10, 5, 1, 0), (10, 5, 5, 0), (11, 5, 3, 0), (50, 5, 0, 10), (12, 5, 0, 7)])
def test_the_schedule_is_the_devices_batching(n: int, b: int, e: int, s: int) -> None:
    plan = schedule(n, b, e, s)
    steps = batch_indices(n, TrainConfig(e, b, 0.1, "sgd", 0.0, s), seed=3)
    assert plan.sizes == tuple(len(i) for i in steps)
    assert plan.distinct == len(torch.cat(steps).unique())
    per_epoch = -(-n // b)
    assert plan.epochs == tuple(i // per_epoch for i in range(len(steps)))


@pytest.fixture(scope="module")
def writer() -> tuple:
    """One FEMNIST writer's first 10 private images, the attacker's prior images, and a fresh CNN."""
    cfg = load_config(REPO / "leakbed/configs/femnist-reconstruction.toml", [f"data.path='{FEMNIST}'"])
    fed = federation(cfg, "random")
    users = list(fed.splits)
    data = fed.splits[users[0]].private.take(np.arange(10))
    aux = np.concatenate([fed.splits[u].prior.x for u in users[1:]])
    torch.manual_seed(0)
    return data, aux, build_model(cfg.model, fed.corpus)


def _update(model: torch.nn.Module, data, tc: TrainConfig) -> tuple[dict, dict]:  # noqa: ANN001
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    local_update(model, data, "multiclass", tc, seed=7, device=torch.device("cpu"))
    delta = {k: start[k] - v.detach() for k, v in model.named_parameters()}
    for k, v in start.items():
        model.get_parameter(k).data.copy_(v)
    return start, delta


@pytest.mark.long
@pytest.mark.shared_data("femnist")
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_the_simulated_update_is_the_devices_update(writer, momentum: float) -> None:
    data, _, model = writer
    tc = TrainConfig(3, 5, 0.05, "sgd", momentum, 0)
    start, delta = _update(model, data, tc)
    x, y = torch.as_tensor(data.x), torch.as_tensor(data.y)
    sim = simulated_update(model, start, [(x[i], y[i]) for i in batch_indices(10, tc, 7)], lr=0.05, momentum=momentum)
    for k in delta:
        torch.testing.assert_close(sim[k], delta[k], rtol=1e-4, atol=1e-6)
    shuffled = simulated_update(model, start, [(x[i], y[i]) for i in batch_indices(10, tc, 8)], lr=0.05, momentum=momentum)
    assert any(not torch.allclose(shuffled[k], delta[k], atol=1e-6) for k in delta)  # the order is the secret


@pytest.mark.shared_data("femnist")
def test_label_counts_are_read_through_every_local_step(writer) -> None:
    data, aux, model = writer
    tc = TrainConfig(5, 5, 0.01, "sgd", 0.0, 0)
    start, delta = _update(model, data, tc)
    plan = schedule(10, 5, 5, 0)
    counts = estimate_counts(model, start, delta, "fc2.bias", plan, lr=0.01, momentum=0.0, aux=torch.as_tensor(aux[:256]))
    guess = np.repeat(np.arange(62), counts)
    assert counts.sum() == 10
    assert label_accuracy(guess, data.y.astype(np.int64), 62) >= 0.9
    assert list(step_weights(3, 0.5)) == [1.75, 1.5, 1.0]
    assert list(rounded_counts(np.array([0.26, 0.5, -1.0, 0.24]), 4)) == [1, 2, 0, 1]


@pytest.mark.slow  # a 150- and a 300-step inversion: kept out of the fast tier (pytest -m fast)
@pytest.mark.shared_data("femnist")
def test_fedavg_inversion_recovers_images_that_fedsgd_inversion_and_chance_do_not(writer) -> None:
    """The headline at a small scale: 5 local epochs of 2 batches of 5 FEMNIST images (U = 10, 10 steps). Ours at
    150 iterations, not 300 (they are most of the test's CPU); IG keeps its 300, so the baseline is not weakened.
    Measured at 150: ours recovers 90% (PSNR 24.1 dB), IG 40% (19.1 dB), chance 10% (17.5 dB); at 100 ours fell
    to 80%, on the bound."""
    data, aux, model = writer
    tc = TrainConfig(5, 5, 0.01, "sgd", 0.0, 0)
    start, delta = _update(model, data, tc)
    plan = schedule(10, 5, 5, 0)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    ours = invert(
        model, start, delta, data.y.astype(np.int64), plan, lr=0.01, momentum=0.0, seed=0,
        settings=Settings(150, 0.05, 0.995, "l2", 0.01, 10.0, 1),
        init=lambda k: (torch.as_tensor(aux.mean(0)) + 0.1 * torch.rand(k, *aux.shape[1:], generator=gen)).clamp(0, 1),
    )  # fmt: skip
    grads = {k: (v / (0.01 * plan.steps)).numpy() for k, v in delta.items()}
    ig = ig_reconstruct(model, grads, data.y.astype(np.int64), (1, 28, 28), steps=300, seed=0)
    chance = aux[np.random.default_rng(0).permutation(len(aux))[:10]]
    recovered = {name: float((psnr_matched(r, data.x) > RECOVERED_PSNR).mean()) for name, r in
                 [("ours", ours.images), ("ig", ig), ("chance", chance)]}  # fmt: skip
    assert recovered["ours"] >= 0.6, recovered
    assert recovered["ours"] >= recovered["ig"] + 0.4 and recovered["ours"] >= recovered["chance"] + 0.4, recovered
    assert psnr_matched(ours.images, data.x).mean() > psnr_matched(chance, data.x).mean() + 3.0


def test_the_plugin_imports_leakbed_only_through_its_public_module() -> None:
    for path in (PLUGIN / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            local = [n for n in names if n.split(".")[0] in {"core", "attacks", "referee", "server", "client", "defenses"}]
            leakbed = [n for n in names if n.split(".")[0] == "leakbed"]
            assert not local and all(n == "leakbed.plugin" for n in leakbed), (path, names)


@pytest.mark.slow
@pytest.mark.shared_data("femnist")
def test_a_real_run_attacks_fedavg_updates_in_the_sandbox_and_the_referee_scores_it(tmp_path: Path) -> None:
    """The plugin's attack in a real Flower simulation, on the session's simulation SuperLink and Ray head
    (``leakbed.simulate``, which ``leakbed run`` submits each prior through; tests/plugins/test_example_plugin.py runs a
    plugin through the CLI's process): the run skips a CLI process's start and its own SuperLink's and Ray's start and
    stop. The ServerApp preflights the config, runs the attack in a bubblewrap lane, has the referee score it and
    writes the report."""
    from leakbed.simulate import simulate

    out = tmp_path / "run"
    sets = [
        f"data.path='{FEMNIST}'", "data.max_users=4", "fl.rounds=1", "workers.sandbox='on'",
        "attack.params.fedavg-inversion.updates_per_round=1", "attack.params.fedavg-inversion.iterations=150",
    ]  # fmt: skip
    # 150 iterations, not 300: the inversion is most of the run's CPU (300: 143 CPU-s for the test, 150: 105). Measured
    # at 150: 60% recovered (chance 0%), PSNR 21.9 dB (chance 15.1); at 300: 90%, 22.9 dB
    metrics = simulate(load_config(REPO / "leakbed/configs/femnist-fedavg-inversion.toml", sets), "random", out)
    assert metrics["attack_sandbox"].startswith("sandboxed: bubblewrap"), metrics["attack_sandbox"]
    m = metrics["suite"]["fedavg-inversion"]
    assert m["updates"] == 1 and m["samples_mean"] == 10 and m["local_steps"] == 10, m
    assert m["recovered"] >= m["recovered_chance"] + 0.3 and m["psnr"] > m["psnr_chance"] + 2.0, m
    assert m["label_accuracy"] >= 0.9 > m["label_chance"], m
    assert m["seconds_per_update"] > 0 and m["reference"]["recovered"] == 0.45  # its declared Scoring.reference
    assert "Dimitrov et al. 2022" in (out / "report.md").read_text()
