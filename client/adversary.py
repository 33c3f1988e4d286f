"""An adversarial participant: active property inference (seed 002 §7.1.5, experiments §7.2.5).

Threat model: one (or a few) of the devices, named in ``adversary.users``, follow the protocol
and upload well-formed updates, but (i) train on the joint loss α·main + (1 − α)·property
(``leakbed.multitask``) so the shared model learns to separate data with and without the property,
and (ii) observe what a participant sees: the global model of each round it is sampled in. From
two consecutive global models it takes the aggregate update and removes its own share
(aggregate − own Δ / K, with K participants a round; exact for equal data sizes), and scores it
on the property direction learnt from auxiliary updates (Algorithm 7's labelled updates, on the
same global model, from its own labelled data with and without the property): a nearest-mean
linear classifier per round, so the model's drift over rounds cannot pose as the property.
It sees no other device's data, user id or update.

Its per-round scores reach the referee through the device's sealed truth record (``adv-round``,
``adv-score``), like every other per-update fact: the adversary is a participant, so it has no
channel to the server's attacks, and the referee reports it apart ("participant attacks").
State across rounds (previous global model, own update, auxiliary updates, property head) lives
in the ClientApp's ``context.state``, which Flower keeps per node for the run.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from torch import nn

from leakbed.config import ExperimentConfig
from leakbed.data import Federation, UserData
from leakbed.multitask import hidden_size, multitask_update
from leakbed.training import TrainConfig, local_update, state_arrays

STATE_KEY = "leakbed-adversary"


def is_adversary(cfg: ExperimentConfig, user: str) -> bool:
    return user in cfg.adversary.users


def flat_update(delta: dict[str, np.ndarray]) -> np.ndarray:
    """Δw over the shared model's parameters, flattened in name order."""
    return np.concatenate([np.asarray(delta[key], np.float64).ravel() for key in sorted(delta)])


def property_score(others: np.ndarray, with_mean: np.ndarray, without_mean: np.ndarray, k: int) -> float:
    """P(another participant's batch held the property), from where the others' aggregate falls on
    the property direction d = mean aux update with − without: with K participants and equal
    weights, no property puts it near (K − 1)/K · without, one property batch shifts it by d / K."""
    d = with_mean - without_mean
    norm = float(np.linalg.norm(d)) or 1.0
    z = (float(others @ d) - (k - 1) / k * float(without_mean @ d)) / (norm * norm / k)
    return float(1.0 / (1.0 + np.exp(-4.0 * (z - 0.5))))


def participants_per_round(cfg: ExperimentConfig, users: int) -> int:
    """K, as the curious FedAvg samples it (public protocol knowledge)."""
    return min(max(int(users * cfg.fl.fraction_train), 1), users)


def _load(state: RecordDict) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    if STATE_KEY not in state:
        return {}, {}
    arrays = {k: v.numpy() for k, v in state.array_records[STATE_KEY].items()}
    meta = {k: float(v) for k, v in state.config_records[STATE_KEY + "-meta"].items()}
    return arrays, meta


def _save(state: RecordDict, arrays: dict[str, np.ndarray], meta: dict[str, float]) -> None:
    state[STATE_KEY] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
    state[STATE_KEY + "-meta"] = ConfigRecord(meta)


def _aux_batch(rng: np.random.Generator, data: UserData, prop: np.ndarray, size: int, share: float) -> UserData:
    """``size`` examples (drawn with replacement) of which round(share·size) hold the property."""
    pos, neg = np.flatnonzero(prop == 1), np.flatnonzero(prop == 0)
    k = int(round(share * size)) if len(pos) else 0
    k = size if not len(neg) else k
    idx = np.concatenate([rng.choice(pos, k), rng.choice(neg, size - k)]) if k < size else rng.choice(pos, size)
    return data.take(rng.permutation(idx))


def adversary_round(
    cfg: ExperimentConfig,
    fed: Federation,
    pid: int,
    model: nn.Module,
    tcfg: TrainConfig,
    *,
    rnd: int,
    seed: int,
    device: torch.device,
    state: RecordDict,
) -> tuple[float, dict[str, object]]:
    """Observe, learn and upload for one round; trains ``model`` in place and returns
    (joint training loss, facts for the sealed truth record)."""
    opts = cfg.adversary
    # the adversary's own labelled data, all of it: the property plan and data defenses describe honest devices
    own = fed.private(pid)
    if opts.property not in own.attrs:
        raise ValueError(f"adversary: the data has no per-example attribute {opts.property!r}")
    arrays, meta = _load(state)
    global_now = state_arrays(model)
    shared = [k for k in global_now if global_now[k].dtype.kind == "f"]
    facts: dict[str, object] = {"adversary": 1}
    k = participants_per_round(cfg, len(fed.user_ids))

    # (1) the previous round's aggregate minus the adversary's own share, scored against the
    # property direction learnt on that round's global model (no drift across rounds)
    if arrays and int(meta.get("round", -1)) == rnd - 1 and "aux-with" in arrays:
        others = flat_update({key: arrays[f"global/{key}"] - global_now[key] - arrays[f"own/{key}"] / k for key in shared})
        facts["adv-round"] = rnd - 1
        facts["adv-score"] = property_score(others, arrays["aux-with"], arrays["aux-without"], k)

    # (2) auxiliary updates on this round's global model, with and without the property (Algorithm 7)
    prop = np.asarray(own.attrs[opts.property]).astype(np.int64)
    rng = np.random.default_rng([cfg.seed, rnd, pid, 0xAD])
    size = tcfg.batch_size * tcfg.steps if tcfg.steps else min(len(own), tcfg.batch_size * 4)
    means = {}
    for label, share in (("with", opts.positive_fraction), ("without", 0.0)):
        deltas = []
        for i in range(opts.aux_batches):
            local = copy.deepcopy(model)
            batch = _aux_batch(rng, own, prop, size, share)
            local_update(local, batch, fed.corpus.task, tcfg, seed=seed + 7 * i + (label == "with"), device=device)
            after = state_arrays(local)
            deltas.append(flat_update({key: global_now[key] - after[key] for key in shared}))
        means[label] = np.mean(deltas, axis=0)

    # (3) the upload: the joint loss α·main + (1 − α)·property, with the head kept on the device
    head = nn.Linear(hidden_size(model), 1)
    if "head/weight" in arrays:
        head.load_state_dict({"weight": torch.from_numpy(arrays["head/weight"]), "bias": torch.from_numpy(arrays["head/bias"])})
    loss = multitask_update(model, head, own, prop, fed.corpus.task, tcfg, opts.alpha, seed=seed, device=device)
    after = state_arrays(model)

    keep = {f"global/{key}": global_now[key] for key in shared}
    keep |= {f"own/{key}": global_now[key] - after[key] for key in shared}
    keep |= {"aux-with": means["with"], "aux-without": means["without"]}
    keep |= {"head/weight": head.weight.detach().cpu().numpy(), "head/bias": head.bias.detach().cpu().numpy()}
    _save(state, keep, {"round": float(rnd)})
    return loss, facts
