"""Per-sample property inference from tapped updates by reconstruction (seed 004 §3.2-3.3, §4.1, Table 1).

Three suite attacks share this pipeline and differ only in what they reconstruct:
``feature-inference`` (seed 004's method: last-conv-block features, ``attacks.feature_inference``),
``dlg`` (pixels, Zhu et al. 2019, ``attacks.dlg``) and ``inverting-gradients`` (pixels, cosine +
total variation, Geiping et al. 2020, ``attacks.inverting_gradients``).

Threat model: the honest-but-curious server of a real run. Per attacked update it holds the
anonymous full Δw and its example count (what FedAvg weighting needs), the round's global model and
the training config it sent (learning rate η, local steps or epochs, batch size B), and its prior
data with the ``property`` attribute as auxiliary data. It never sees a batch, a user or the truth.

Seed 004 attacks FedSGD (one step: Δw = η·g). Under FedAvg the device takes S steps, so the attack
reads g = Δw / (η·S), the mean gradient over the U distinct examples the S batches used (computed
from the example count, B and S as ``core.training.batch_indices`` cuts them), as if taken at the
global model: exact for S = 1, an approximation that drifts with S, which is what the reach map
measures. It does not unroll the S local steps (Geiping et al. §5 do); that is left open. Each
attack reconstructs U samples, and a property classifier f_p (FC 1024-512, dropout, Adam 1e-4,
50 epochs; seed 004 §4) trained on the prior's features (or pixels) predicts each one's property.
The outputs (reconstructions, P(property) per sample) go to the store; the referee matches them to
the sealed batch records.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from attacks.aux_updates import concat
from attacks.dlg import dlg_reconstruct
from attacks.feature_inference import feature_split, predict_property, reconstruct_features, train_property_net
from attacks.inverting_gradients import ig_labels, ig_reconstruct
from attacks.knowledge import AttackerKnowledge
from attacks.records import RoundSnapshot
from attacks.suite import AttackSpec, Needs, register
from core.data.corpus import UserData
from core.models import build_model, final_linear
from core.store import UpdateStore
from core.training import TrainConfig, load_arrays

NAMES = ("feature-inference", "dlg", "inverting-gradients")
CONFIG_KIND = "train_config"


@dataclass(frozen=True)
class LocalSetting:
    """How a device's update was made, as the server can tell from what it sent and received."""

    steps: int  # local SGD steps S
    samples: int  # distinct examples U the S batches used
    lr: float
    batch_size: int


def local_setting(cfg: TrainConfig, num_examples: int) -> LocalSetting:
    """S and U for an update of ``num_examples`` examples, the batches cut as ``core.training.batch_indices`` does."""
    n, b = num_examples, cfg.batch_size
    per_epoch = [b] * (n // b) + ([n % b] if n % b else [])
    if not per_epoch:
        return LocalSetting(0, 0, cfg.lr, b)
    sizes = (per_epoch * (cfg.steps // len(per_epoch) + 1))[: cfg.steps] if cfg.steps else per_epoch * cfg.epochs
    return LocalSetting(len(sizes), min(n, sum(sizes)), cfg.lr, b)


def save_train_config(store: UpdateStore, knowledge: AttackerKnowledge, snap: RoundSnapshot) -> None:
    """Keep the round's training config beside its global model (the fit reads both back)."""
    folder = store.root / CONFIG_KIND
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".r{snap.round:06d}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(dict(snap.train_config)), encoding="utf-8")
    os.replace(tmp, folder / f"r{snap.round:06d}.json")


def read_train_config(store: UpdateStore, rnd: int) -> TrainConfig:
    return TrainConfig.from_config(json.loads((store.root / CONFIG_KIND / f"r{rnd:06d}.json").read_text(encoding="utf-8")))


def _content_key(delta: dict[str, np.ndarray]) -> str:
    """An order of updates that depends on their content only (ids are random per run)."""
    h = hashlib.sha256()
    for k in sorted(delta):
        h.update(np.ascontiguousarray(delta[k]).tobytes())
    return h.hexdigest()


def choose_updates(store: UpdateStore, seed: int, count: int) -> list[tuple[int, str, dict[str, np.ndarray]]]:
    """Up to ``count`` (round, id, Δw), from the latest round back, a seeded pick within a round."""
    rounds = sorted({int(f.stem[1:7]) for f in (store.root / "anon_full").glob("r*.npz")}, reverse=True)
    chosen: list[tuple[int, str, dict[str, np.ndarray]]] = []
    for rnd in rounds:
        updates = sorted(store.read_anon_full(rnd).items(), key=lambda item: _content_key(item[1]))
        order = np.random.default_rng([seed, rnd, 0x404]).permutation(len(updates))
        chosen += [(rnd, *updates[i]) for i in order[: count - len(chosen)]]
        if len(chosen) >= count:
            break
    return chosen


def auxiliary(knowledge: AttackerKnowledge, most: int) -> UserData:
    """The attacker's prior pooled over users, at most ``most`` examples (a seeded pick)."""
    aux = concat(list(knowledge.prior.values()))
    rng = np.random.default_rng([knowledge.seed, 0xA4])
    return aux.take(np.sort(rng.permutation(len(aux))[:most]))


class _Attack:
    """One reconstruction attack's fit: f_p, then reconstruct and classify each chosen update."""

    def __init__(self, name: str, knowledge: AttackerKnowledge) -> None:
        self.name = name
        self.knowledge = knowledge
        self.opts = knowledge.attack.reconstruction
        self.aux = auxiliary(knowledge, self.opts.aux_examples)
        self.prop = np.asarray(self.aux.attrs["property"]).astype(np.int64)
        self.meta = knowledge.corpus_meta
        self.model = build_model(knowledge.model, self.meta)
        self._pixel_net = None
        self._feature_nets: dict[int, object] = {}

    def _net(self, rnd: int):  # noqa: ANN202 - a PropertyNet
        """f_p: on pixels once (they do not depend on the model), on deep features per round."""
        o = self.opts
        if self.name != "feature-inference":
            if self._pixel_net is None:
                x = self.aux.x.reshape(len(self.aux), -1)
                self._pixel_net = train_property_net(
                    x, self.prop, epochs=o.classifier_epochs, lr=o.classifier_lr, seed=self.knowledge.seed
                )
            return self._pixel_net
        if rnd not in self._feature_nets:
            with torch.no_grad():
                feats = feature_split(self.model).features(torch.as_tensor(self.aux.x)).numpy()
            self._feature_nets[rnd] = train_property_net(
                feats, self.prop, epochs=o.classifier_epochs, lr=o.classifier_lr, seed=self.knowledge.seed
            )
        return self._feature_nets[rnd]

    def reconstruct(self, grads: dict[str, np.ndarray], samples: int, seed: int) -> np.ndarray:
        """U reconstructions, flattened: deep features (feature-inference) or pixels (dlg, inverting-gradients)."""
        a, shape = self.knowledge.attack, self.meta.input_shape
        if self.name == "feature-inference":
            fi = a.feature_inference
            return reconstruct_features(
                feature_split(self.model), grads, samples, self.meta.num_classes, shape,
                steps=fi.steps, step_size=fi.step_size, block_weight=fi.block_weight, seed=seed, labels=fi.labels,
                init=fi.init, schedule=fi.schedule, restarts=fi.restarts, nonnegative=fi.nonnegative,
                aux_x=self.aux.x, aux_y=self.aux.y,
            )  # fmt: skip
        if self.name == "dlg":
            images, _ = dlg_reconstruct(self.model, grads, samples, self.meta.num_classes, shape, steps=a.dlg.steps, seed=seed)
        else:
            ig = a.inverting_gradients
            labels = ig_labels(self.model, final_linear(self.model) + ".bias", grads, samples, self.aux.x)
            images = ig_reconstruct(
                self.model, grads, labels, shape, steps=ig.steps, step_size=ig.step_size, tv_weight=ig.tv_weight,
                restarts=ig.restarts, seed=seed,
            )  # fmt: skip
        return images.reshape(samples, -1)

    def fit(self, store: UpdateStore) -> None:
        anon = store.read_anon()
        examples = {str(i): int(n) for i, n in zip(anon["ids"], anon["num_examples"], strict=True)}
        ids, rounds, counts, steps, batches, recons, probs = [], [], [], [], [], [], []
        skipped = 0
        for i, (rnd, uid, delta) in enumerate(choose_updates(store, self.knowledge.seed, self.opts.updates)):
            setting = local_setting(read_train_config(store, rnd), examples[uid])
            if not setting.samples or setting.samples > self.opts.max_samples:
                skipped += 1
                continue
            load_arrays(self.model, store.read_global(rnd))
            self.model.eval()
            scale = setting.lr * setting.steps
            grads = {k: np.asarray(v, np.float32) / scale for k, v in delta.items()}
            seed = zlib.crc32(f"{self.knowledge.seed}/{self.name}/{rnd}/{i}".encode())
            torch.manual_seed(seed)
            recon = self.reconstruct(grads, setting.samples, seed).astype(np.float32)
            ids.append(uid)
            rounds.append(rnd)
            counts.append(setting.samples)
            steps.append(setting.steps)
            batches.append(setting.batch_size)
            recons.append(recon)
            probs.append(predict_property(self._net(rnd), recon))
        store.write_result(
            self.name,
            {
                "ids": np.asarray(ids, dtype=str),
                "rounds": np.asarray(rounds, np.int64),
                "counts": np.asarray(counts, np.int64),
                "steps": np.asarray(steps, np.int64),
                "batch_size": np.asarray(batches, np.int64),
                "recon": np.concatenate(recons) if recons else np.empty((0, 0), np.float32),
                "probs": np.concatenate(probs) if probs else np.empty(0, np.float32),
                "skipped": np.asarray(skipped),
                "space": np.asarray("features" if self.name == "feature-inference" else "pixels"),
            },
        )


def _fit_hook(name: str):  # noqa: ANN202 - a FitHook
    def fit(store: UpdateStore, knowledge: AttackerKnowledge) -> None:
        torch.set_num_threads(1)
        _Attack(name, knowledge).fit(store)

    return fit


_PIXELS = Needs(modality="image", tasks=frozenset({"multiclass"}), property_column=True, full_updates=True, plain_sgd=True)
NEEDS = {
    # the seed's split into a last conv block f_n and an FC-ReLU-FC classifier f_c is written for the quick CNN
    "feature-inference": Needs(**{**_PIXELS.__dict__, "models": frozenset({"cnn"})}),
    "dlg": _PIXELS,
    "inverting-gradients": _PIXELS,
}
for _name in NAMES:
    register(AttackSpec(_name, fit=_fit_hook(_name), on_round=save_train_config, needs=NEEDS[_name]))
