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
import zlib
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from leakbed.attacks.aux_updates import concat
from leakbed.attacks.contract import Attack, AttackContext, Needs, Outputs, Params
from leakbed.attacks.dlg import dlg_reconstruct
from leakbed.attacks.feature_inference import feature_split, predict_property, reconstruct_features, train_property_net
from leakbed.attacks.inverting_gradients import ig_labels, ig_reconstruct
from leakbed.core.data.corpus import UserData
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import build_model, final_linear
from leakbed.core.training import TrainConfig, load_arrays


class ReconstructionParams(Params):
    """What the reconstruction attacks share (seed 004 §4.1, Table 1): which tapped updates they attack and the
    property classifier f_p trained on the attacker's prior."""

    updates: int = Field(
        8, ge=1, le=100_000, description="tapped updates attacked per run, the latest rounds first (seeded pick) [updates]"
    )
    max_samples: int = Field(
        256, ge=1, le=65_536, description="skip (and count) an update whose local training used more distinct examples [examples]"
    )
    classifier_epochs: int = Field(50, ge=1, le=10_000, description="epochs of the property classifier f_p (seed: 50) [count]")
    classifier_lr: float = Field(1e-4, gt=0.0, le=1.0, description="Adam learning rate of f_p (seed: 1e-4) [1]")
    aux_examples: int = Field(2000, ge=16, le=1_000_000, description="most auxiliary (prior) examples f_p trains on [count]")


class FeatureInferenceParams(ReconstructionParams):
    """Individual property inference in deep-feature space (seed 004 §3.2-3.3): the reconstruction's options."""

    steps: int = Field(
        300,
        ge=0,
        le=100_000,
        description="gradient-matching iterations per update; 0 = take the closed-form features of init "
        "'analytic' or 'per-sample' as they are [count]",
    )
    step_size: float = Field(0.1, gt=0.0, le=10.0, description="step alpha of the dummy-feature optimiser (Adam) [1]")
    block_weight: float = Field(0.1, ge=0.0, le=100.0, description="weight lambda of the last conv block's gradient distance [1]")
    labels: Literal["optimised", "inferred"] = Field(
        "optimised", description="dummy labels: optimised with x (seed) or fixed to those read from the bias gradient [name]"
    )
    init: Literal["random", "auxiliary", "analytic", "per-sample"] = Field(
        "random",
        description="start of the dummy block inputs: uniform noise (seed), auxiliary images' f_{n-1} outputs, "
        "or those fitted to the closed-form class-wise features of the classifier gradient, or to per-sample "
        "features refined from them by alternating least squares [name]",
    )
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="step schedule of the dummy optimiser: constant alpha (seed) or cosine decay to 0 [name]"
    )
    restarts: int = Field(1, ge=1, le=100, description="random restarts per batch; the lowest final loss is kept [count]")
    nonnegative: bool = Field(False, description="feed ReLU(x) to the last conv block [flag]")

    @model_validator(mode="after")
    def _closed_form_without_steps(self) -> FeatureInferenceParams:
        if self.steps == 0 and self.init not in ("analytic", "per-sample"):
            raise ValueError("steps = 0 keeps the closed-form features, so init must be 'analytic' or 'per-sample'")
        return self


class DLGParams(ReconstructionParams):
    """Deep Leakage from Gradients (Zhu et al. 2019), the pixel-space baseline of seed 004 Table 1."""

    steps: int = Field(15, ge=1, le=10_000, description="L-BFGS steps of up to 20 evaluations each [count]")


class InvertingGradientsParams(ReconstructionParams):
    """Inverting Gradients (Geiping et al. 2020): cosine gradient distance + total variation, seed 004 Table 1's IG."""

    steps: int = Field(300, ge=1, le=100_000, description="signed-Adam iterations on the dummy images [count]")
    step_size: float = Field(0.1, gt=0.0, le=10.0, description="Adam step, decayed ×0.1 at 3/8, 5/8, 7/8 of the steps [1]")
    tv_weight: float = Field(1e-2, ge=0.0, le=100.0, description="weight of the total-variation prior [1]")
    restarts: int = Field(1, ge=1, le=100, description="random restarts; the lowest final loss is kept [count]")


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


def read_train_config(store: InputsView, rnd: int) -> TrainConfig:
    """The training config the server sent with round ``rnd`` (trusted code files it beside the global model)."""
    return TrainConfig.from_config(store.read_config(rnd))


def _content_key(delta: dict[str, np.ndarray]) -> str:
    """An order of updates that depends on their content only (ids are random per run)."""
    h = hashlib.sha256()
    for k in sorted(delta):
        h.update(np.ascontiguousarray(delta[k]).tobytes())
    return h.hexdigest()


def choose_updates(store: InputsView, seed: int, count: int) -> list[tuple[int, str, dict[str, np.ndarray]]]:
    """Up to ``count`` (round, id, Δw), from the latest round back, a seeded pick within a round."""
    rounds = sorted(store.anon_full_rounds(), reverse=True)
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


class _Reconstructor:
    """One reconstruction attack's work: f_p, then reconstruct and classify each chosen update."""

    def __init__(self, name: str, knowledge: AttackerKnowledge, params: ReconstructionParams) -> None:
        self.name = name
        self.knowledge = knowledge
        self.opts = params
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
        a, shape = self.opts, self.meta.input_shape
        if self.name == "feature-inference":
            fi = a
            return reconstruct_features(
                feature_split(self.model), grads, samples, self.meta.num_classes, shape,
                steps=fi.steps, step_size=fi.step_size, block_weight=fi.block_weight, seed=seed, labels=fi.labels,
                init=fi.init, schedule=fi.schedule, restarts=fi.restarts, nonnegative=fi.nonnegative,
                aux_x=self.aux.x, aux_y=self.aux.y,
            )  # fmt: skip
        if self.name == "dlg":
            images, _ = dlg_reconstruct(self.model, grads, samples, self.meta.num_classes, shape, steps=a.steps, seed=seed)
        else:
            ig = a
            labels = ig_labels(self.model, final_linear(self.model) + ".bias", grads, samples, self.aux.x)
            images = ig_reconstruct(
                self.model, grads, labels, shape, steps=ig.steps, step_size=ig.step_size, tv_weight=ig.tv_weight,
                restarts=ig.restarts, seed=seed,
            )  # fmt: skip
        return images.reshape(samples, -1)

    def outputs(self, store: InputsView) -> Outputs:
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
        return {
            "ids": np.asarray(ids, dtype=str),
            "rounds": np.asarray(rounds, np.int64),
            "counts": np.asarray(counts, np.int64),
            "steps": np.asarray(steps, np.int64),
            "batch_size": np.asarray(batches, np.int64),
            "recon": np.concatenate(recons) if recons else np.empty((0, 0), np.float32),
            "probs": np.concatenate(probs) if probs else np.empty(0, np.float32),
            "skipped": np.asarray(skipped),
            "space": np.asarray("features" if self.name == "feature-inference" else "pixels"),
        }


_PIXELS = Needs(
    modality="image", tasks=frozenset({"multiclass"}), property_column=True, full_updates=True, plain_sgd=True, records=True
)
THREAT = (
    "the honest-but-curious server of a real run: per attacked update the anonymous full Δw and its example count, the "
    "round's global model and the training config it sent (η, local steps or epochs, B), and its prior data with the "
    "property attribute as auxiliary data; never a batch, a user or the truth"
)


class _Reconstruction(Attack):
    """Seed 004's pipeline: reconstruct each chosen update's samples, classify each one's property."""

    threat = THREAT

    def predict(self, ctx: AttackContext) -> Outputs:
        torch.set_num_threads(1)
        return _Reconstructor(self.name, ctx.knowledge, ctx.params).outputs(ctx.store)


class FeatureInference(_Reconstruction):
    name: ClassVar[str] = "feature-inference"
    params = FeatureInferenceParams
    # the seed's split into a last conv block f_n and an FC-ReLU-FC classifier f_c is written for the quick CNN
    needs = Needs(**{**_PIXELS.__dict__, "models": frozenset({"cnn"})})
    source = "seed 004 §3.2-3.3, §4.1, Table 1 (proposed)"
    scorer = "reconstruction"


class DLG(_Reconstruction):
    name: ClassVar[str] = "dlg"
    params = DLGParams
    needs = _PIXELS
    source = "Zhu et al. 2019, as seed 004 Table 1's DLG baseline"
    scorer = "reconstruction"


class InvertingGradients(_Reconstruction):
    name: ClassVar[str] = "inverting-gradients"
    params = InvertingGradientsParams
    needs = _PIXELS
    source = "Geiping et al. 2020, as seed 004 Table 1's IG baseline"
    scorer = "reconstruction"
