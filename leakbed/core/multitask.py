"""The active property attacker's multi-task model (seed 002 §7.1.5, Figure 7.2).

The adversarial participant extends its local copy of the shared model with a property classifier
on the last hidden layer (the input of the final FC layer) and trains on the joint loss
L_mt = α·L(x, y; θ) + (1 − α)·L(x, p; θ). Its uploads then make the shared model learn separable
representations for data with and without the property, so the other participants' updates become
separable too. The head stays on the device; only the shared model's weights are uploaded.
It lives on the shared ground (not in ``leakbed/attacks/``) because the attacker here is a device.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from leakbed.core.config import ConfigError, ExperimentConfig
from leakbed.core.data import Federation
from leakbed.core.data.corpus import Task, UserData
from leakbed.core.models import final_linear
from leakbed.core.sgd import SGD
from leakbed.core.training import TrainConfig, _optimizer, batch_indices, loss_fn


def hidden_size(model: nn.Module) -> int:
    """Width of the last hidden layer: the final FC layer's input features."""
    return dict(model.named_modules())[final_linear(model)].in_features


def _with_hidden(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, last hidden representation), read with a forward hook on the final FC layer."""
    seen: list[torch.Tensor] = []
    handle = dict(model.named_modules())[final_linear(model)].register_forward_hook(lambda m, i, o: seen.append(i[0]))
    try:
        logits = model(x)
    finally:
        handle.remove()
    return logits, seen[0]


def multitask_update(
    model: nn.Module,
    head: nn.Linear,
    data: UserData,
    prop: np.ndarray,
    task: Task,
    cfg: TrainConfig,
    alpha: float,
    *,
    seed: int,
    device: torch.device,
) -> float:
    """Train ``model`` and ``head`` in place on α·main + (1 − α)·property over the same batches an
    honest device would use (``batch_indices``); returns the mean joint loss."""
    x = torch.from_numpy(data.x)
    y = torch.from_numpy(data.y)
    p = torch.as_tensor(prop, dtype=torch.float32)
    model.to(device).train()
    head.to(device).train()
    opt = _optimizer(model, cfg)
    head_opt = SGD(head.parameters(), lr=cfg.lr)
    total, steps = 0.0, 0
    for idx in batch_indices(len(x), cfg, seed):
        opt.zero_grad()
        head_opt.zero_grad()
        logits, hidden = _with_hidden(model, x[idx].to(device))
        main = loss_fn(task, logits, y[idx].to(device))
        side = nn.functional.binary_cross_entropy_with_logits(head(hidden).squeeze(-1), p[idx].to(device))
        loss = alpha * main + (1 - alpha) * side
        loss.backward()
        opt.step()
        head_opt.step()
        total += float(loss.detach())
        steps += 1
    return total / max(steps, 1)


def check_adversary(cfg: ExperimentConfig, fed: Federation) -> None:
    """One-line errors, before anything starts, for adversarial participants the run cannot have."""
    opts = cfg.adversary
    if not opts.users:
        return
    unknown = [u for u in opts.users if u not in fed.splits]
    if unknown:
        raise ConfigError(f"adversary.users: {unknown[0]!r} is not a user of the federation")
    if fed.corpus.task != "multiclass":
        raise ConfigError(f"adversary: active property inference needs a multiclass task, not {fed.corpus.task}")
    for user in opts.users:
        prop = fed.splits[user].private.attrs.get(opts.property)
        if prop is None:
            raise ConfigError(f"adversary: the data has no per-example attribute {opts.property!r}")
        if not np.asarray(prop).any():
            raise ConfigError(f"adversary: {user} holds no example with the property, so it cannot learn it")
