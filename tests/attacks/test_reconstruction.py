"""The reconstruction attacks (seed 004 Table 1: feature-inference, DLG, Inverting Gradients) through
the attack pool (each in its sandboxed lane) on a small store of real device updates, scored by the referee
(kind ``reconstruction``) against sealed truth:
near-perfect at one sample and one step (FedSGD), and degrading with batch size and local steps."""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest
import torch

from leakbed.attacks.reconstruction import local_setting
from leakbed.client.batch_truth import batch_truth
from leakbed.core.config import ExperimentConfig, build_config
from leakbed.core.data import federation
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import attack_keys, build_model
from leakbed.core.records import AnonymousUpdate, RoundSnapshot
from leakbed.core.store import UpdateStore
from leakbed.core.training import TrainConfig, local_update, state_arrays
from leakbed.core.updates import delta_vector
from leakbed.preflight import declarations, resolve
from leakbed.referee.seal import Sealer
from leakbed.referee.truth import Referee
from leakbed.workers import AttackPool
from leakbed.workers.sandbox import limits_for
from tests.attacks.reid_store import score_with

BASE = [
    "data.synthetic.users=6",
    "data.synthetic.examples_per_user=48",
    "data.synthetic.image_size=8",
    "data.synthetic.property_rate=0.5",
    "split.priors=['random']",
    "fl.lr=0.1",
    "workers.count=1",
]
SHARED = {"updates": 3, "classifier_epochs": 30, "classifier_lr": 1e-3}
# DLG's L-BFGS settles in its local minimum within 3 steps here (measured: the same errors at 3, 5 and 10 steps), and
# IG's one-image error is the same at 100 steps as at 200 (0.030): the fewer steps halve the test's attack work
PARAMS = {
    "dlg": {**SHARED, "steps": 5},
    "inverting-gradients": {**SHARED, "steps": 100},
    "feature-inference": {**SHARED, "steps": 0, "labels": "inferred", "init": "per-sample"},
}


def _config(suite: list[str], *extra: str) -> ExperimentConfig:
    attack = {"suite": suite, "params": {n: PARAMS[n] for n in suite}}
    return build_config({"attack": attack}, [*BASE, *extra])


def attack_store(tmp_path, cfg: ExperimentConfig, names: list[str], *, users: int = 3) -> tuple[UpdateStore, Referee]:
    """One round of real device updates (the config's η, steps and batch) filed through the pool, the
    attacks fitted, each in its lane, their outputs filed in ``tmp_path / "outputs"``; the truth sealed as the
    shuffler seals it. Returns the store and its referee."""
    decls = declarations(cfg)
    cfg = resolve(cfg, decls)  # the attacks' parameters checked against their declared schemas, defaults filled in
    fed = federation(cfg, "random")
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, fed.corpus)
    keys = attack_keys(model, ["final"])
    glob = state_arrays(model)
    tcfg = TrainConfig.of(cfg.fl)
    knowledge = AttackerKnowledge(fed.prior(), replace(fed.corpus, users={}), cfg.model, keys, seed=7, device="cpu")
    sealer = Sealer(tmp_path / "referee")
    updates = []
    for pid in range(users):
        data = fed.private(pid)
        seed = zlib.crc32(f"{cfg.seed}/1/{pid}/device".encode())
        local = build_model(cfg.model, fed.corpus)
        local.load_state_dict(model.state_dict())
        torch.manual_seed(seed)
        local_update(local, data, fed.corpus.task, tcfg, seed=seed, device=torch.device("cpu"))
        after = state_arrays(local)
        uid = sealer.new_update_id()
        sealer.seal(uid, fed.user_ids[pid], 1, batch_truth(data, tcfg, seed, records=True))
        full = {k: (glob[k] - after[k]).astype(np.float32) for k in glob}
        updates.append(AnonymousUpdate(uid, 1, delta_vector(glob, after, keys), len(data), full))
    pool = AttackPool(
        knowledge,
        str(tmp_path / "store"),
        declarations=decls,
        params={n: cfg.attack.params[n] for n in names},
        outputs=tmp_path / "outputs",
        count=1,
        queue_size=8,
        submit_timeout=30,
        run_id="random",
        sandbox=limits_for(cfg.workers)[0],
        log_dir=tmp_path / "logs",
        shadow=False,  # the reconstruction attacks read Δw, the global model and the config, never shadow updates
    )
    try:
        pool.submit_round(RoundSnapshot(1, glob, {**tcfg.to_config(), "participants": users}))
        pool.submit_updates(updates)
        assert pool.drain(120)
        pool.fit(names, timeout=600)
    finally:
        pool.close()
    assert not pool.stats.errors, pool.stats.errors
    return UpdateStore(tmp_path / "store" / "random"), Referee.load(tmp_path / "referee")


def _score(name: str, tmp_path, store: UpdateStore, referee: Referee, cfg: ExperimentConfig) -> dict:
    out = tmp_path / "random"
    out.mkdir(exist_ok=True)
    return score_with(store, referee, name, out, cfg, outputs=tmp_path / "outputs")


def test_local_setting_counts_steps_and_distinct_examples():
    assert local_setting(TrainConfig(1, 8, 0.1, "sgd", 0.0, 1), 50) == local_setting(TrainConfig(1, 8, 0.1, "sgd", 0.0, 1), 50)
    one = local_setting(TrainConfig(1, 8, 0.1, "sgd", 0.0, 1), 50)
    assert (one.steps, one.samples) == (1, 8)
    five = local_setting(TrainConfig(1, 8, 0.1, "sgd", 0.0, 5), 50)
    assert (five.steps, five.samples) == (5, 40)
    many = local_setting(TrainConfig(1, 32, 0.1, "sgd", 0.0, 20), 50)  # 20 steps over 2-batch epochs: every example
    assert (many.steps, many.samples) == (20, 50)
    epochs = local_setting(TrainConfig(2, 16, 0.1, "sgd", 0.0, 0), 50)  # full epochs: 4 batches (16, 16, 16, 2) each
    assert (epochs.steps, epochs.samples) == (8, 50)


@pytest.mark.slow  # no Ray, but 20-40 s on 2 loaded cores: kept out of the fast loop
def test_dlg_and_ig_recover_one_image_in_fedsgd_and_lose_it_at_batch_8(tmp_path):
    cfg = _config(["dlg", "inverting-gradients"], "fl.local_steps=1", "fl.batch_size=1")
    store, referee = attack_store(tmp_path / "b1", cfg, ["dlg", "inverting-gradients"])
    dlg1 = _score("dlg", tmp_path / "b1", store, referee, cfg)
    ig1 = _score("inverting-gradients", tmp_path / "b1", store, referee, cfg)
    assert dlg1["updates"] == 3 and dlg1["samples_mean"] == 1 and dlg1["records_missing"] == 0
    # One image: the property is read right from either reconstruction (measured DLG 2 of 3, IG 3 of 3), but
    # on this ReLU CNN DLG's L-BFGS stops in a local minimum (pixel MSE 0.10, about the images' variance:
    # Zhu et al. swap ReLU for sigmoid) where IG's cosine + TV gets much closer (0.03).
    assert dlg1["accuracy"] >= 2 / 3 and ig1["accuracy"] >= 2 / 3, (dlg1, ig1)
    assert ig1["reconstruction_error"] < 0.6 * dlg1["reconstruction_error"], (dlg1, ig1)

    cfg8 = _config(["dlg", "inverting-gradients"], "fl.local_steps=1", "fl.batch_size=8")
    store8, referee8 = attack_store(tmp_path / "b8", cfg8, ["dlg", "inverting-gradients"])
    dlg8 = _score("dlg", tmp_path / "b8", store8, referee8, cfg8)
    ig8 = _score("inverting-gradients", tmp_path / "b8", store8, referee8, cfg8)
    assert dlg8["samples_mean"] == 8 and ig8["updates"] == 3
    # Batch 8 (measured): DLG 54%, below the majority guess (58%), its pixels further off (MSE 0.135); IG
    # degrades too (0.085, from 0.030)
    assert dlg8["accuracy"] <= dlg8["chance"] and dlg8["reconstruction_error"] > dlg1["reconstruction_error"], dlg8
    assert ig8["reconstruction_error"] > 2 * ig1["reconstruction_error"], (ig1, ig8)


@pytest.mark.slow  # no Ray, but 20-40 s on 2 loaded cores: kept out of the fast loop
def test_feature_inference_is_exact_for_one_sample_and_degrades_with_local_steps(tmp_path):
    cfg = _config(["feature-inference"], "fl.local_steps=1", "fl.batch_size=1")
    store, referee = attack_store(tmp_path / "s1", cfg, ["feature-inference"])
    one = _score("feature-inference", tmp_path / "s1", store, referee, cfg)
    cfg20 = _config(["feature-inference"], "fl.local_steps=20", "fl.batch_size=1")
    store20, referee20 = attack_store(tmp_path / "s20", cfg20, ["feature-inference"])
    twenty = _score("feature-inference", tmp_path / "s20", store20, referee20, cfg20)
    # one sample, one step: the classifier gradient gives its features exactly (measured error 1e-12)
    assert one["reconstruction_error"] < 1e-6 and one["accuracy"] == 1.0, one
    # 20 steps of batch 1 read as one gradient over ~19 samples: features off (measured error 0.2) and
    # the property at chance (measured 48%)
    assert twenty["local_steps"] == 20 and twenty["samples_mean"] > 10
    assert twenty["reconstruction_error"] > 0.05 and twenty["accuracy"] <= twenty["chance"] + 0.1, twenty


@pytest.mark.parametrize(
    ("suite", "extra", "match"),
    [
        (["feature-inference"], "model.name='resnet18'", "needs model.name cnn"),
        (["dlg"], "fl.optimizer='adam'", "needs fl.optimizer = 'sgd'"),
        (["inverting-gradients"], "fl.momentum=0.9", "fl.momentum = 0"),
    ],
)
def test_unsupported_model_or_optimiser_is_refused(suite, extra, match):
    from leakbed.preflight import preflight

    with pytest.raises(ValueError, match=match):
        preflight(_config(suite, extra))
