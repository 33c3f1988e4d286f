"""FedAvg DeviceUpdate (seed 001, Algorithm 1), shared by devices and the attacker's shadow devices.

It lives on the shared ground because the curious server must replay exactly the training a
device runs (same epochs, batch size, learning rate, optimizer) on its prior data (seed 001 §6,
"Training and Evaluation Data for Attacker").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from leakbed.core.config import FLConfig
from leakbed.core.data.corpus import Task, UserData
from leakbed.core.sgd import SGD


@dataclass(frozen=True)
class TrainConfig:
    """What the server sends each round and the attacker reuses for its shadow updates: the one codec
    between the experiment's ``fl`` section, the round's config record on the wire (``KEYS``) and training."""

    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    momentum: float
    steps: int = 0  # local batches per round; 0 = full epochs (FedSGD-style: 1)

    KEYS = ("epochs", "batch_size", "lr", "optimizer", "momentum", "steps")  # the wire keys, here only

    def to_config(self) -> dict[str, float | int | str]:
        """The round config's training keys (what devices train with and the attack side receives)."""
        return asdict(self)

    @classmethod
    def from_config(cls, conf: Mapping[str, object]) -> TrainConfig:
        """From the round's training config as the server sent it (``steps`` absent = full epochs)."""
        return cls(
            int(conf["epochs"]),  # type: ignore[arg-type]
            int(conf["batch_size"]),  # type: ignore[arg-type]
            float(conf["lr"]),  # type: ignore[arg-type]
            str(conf["optimizer"]),
            float(conf["momentum"]),  # type: ignore[arg-type]
            int(conf.get("steps", 0)),  # type: ignore[arg-type]
        )

    @classmethod
    def of(cls, fl: FLConfig) -> TrainConfig:
        """The devices' training under an experiment's ``fl`` section."""
        return cls(fl.local_epochs, fl.batch_size, fl.lr, fl.optimizer, fl.momentum, fl.local_steps)


def pick_device(preference: str = "auto") -> torch.device:
    """CUDA when present (or asked for), else CPU."""
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def loss_fn(task: Task, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if task == "multilabel":
        return nn.functional.binary_cross_entropy_with_logits(logits, y)
    if task == "next-token":
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=0)
    return nn.functional.cross_entropy(logits, y)


def _optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer | SGD:
    """torch.optim.SGD's numbers without its first-call cost in each process (``core.sgd``)."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr)
    return SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)


def batch_indices(n: int, cfg: TrainConfig, seed: int) -> list[torch.Tensor]:
    """The example indices of each local step, in order: E epochs of shuffled batch-B steps, cut
    after ``cfg.steps`` batches when > 0 (a device can report which examples its update used)."""
    gen = torch.Generator().manual_seed(seed)
    out: list[torch.Tensor] = []
    epochs = 0
    while n and (len(out) < cfg.steps if cfg.steps else epochs < cfg.epochs):
        order = torch.randperm(n, generator=gen)
        out += [order[start : start + cfg.batch_size] for start in range(0, n, cfg.batch_size)]
        epochs += 1
    return out[: cfg.steps] if cfg.steps else out


def local_update(model: nn.Module, data: UserData, task: Task, cfg: TrainConfig, *, seed: int, device: torch.device) -> float:
    """Train ``model`` in place for E epochs (or ``cfg.steps`` batches) of batch-B steps; returns the mean training loss."""
    x = torch.from_numpy(data.x)
    y = torch.from_numpy(data.y)
    model.to(device).train()
    opt = _optimizer(model, cfg)
    total, steps = 0.0, 0
    for idx in batch_indices(len(x), cfg, seed):
        opt.zero_grad()
        loss = loss_fn(task, model(x[idx].to(device)), y[idx].to(device))
        loss.backward()
        opt.step()
        total += float(loss.detach())
        steps += 1
    return total / max(steps, 1)


EVAL_CHUNK_BYTES = 64 << 20  # the next-token evaluation's log-softmax works through a batch's logits this much at a time


@torch.no_grad()
def evaluate(model: nn.Module, data: UserData, task: Task, *, device: torch.device, batch_size: int = 512) -> dict[str, float]:
    """Utility of a model: accuracy (multiclass), micro AP (multilabel), top-5 accuracy (next-token).

    The model sees the data in batches of ``batch_size`` (the batches fix its floating-point results). Next-token
    logits are reduced batch by batch: only each batch's (B, L, V) logits are held, never the whole test set's
    (5,000 windows x 32 tokens x a 5,000-word vocabulary are 3.2 GB of float32, and the loss used to hold them
    three times over); the loss and the top-5 accuracy are the very values the whole tensor gives (``_next_token``)."""
    model.to(device).eval()
    if task == "next-token":
        return _next_token(model, data, device, batch_size)
    outs = [model(torch.from_numpy(data.x[i : i + batch_size]).to(device)).cpu() for i in range(0, len(data), batch_size)]
    logits = torch.cat(outs)
    y = torch.from_numpy(data.y)
    loss = float(loss_fn(task, logits, y))
    if task == "multiclass":
        acc = float((logits.argmax(1) == y).float().mean())
        return {"loss": loss, "accuracy": acc, "utility": acc}
    from sklearn.metrics import average_precision_score

    ap = float(average_precision_score(y.numpy(), logits.numpy(), average="micro"))
    return {"loss": loss, "ap": ap, "utility": ap}


def _next_token(model: nn.Module, data: UserData, device: torch.device, batch_size: int) -> dict[str, float]:
    """Next-token loss and top-5 accuracy over ``data``, holding one batch's logits at a time.

    Per position it keeps the target's log-probability and whether the target is in the top 5: the log-softmax and
    the top-k of a row do not depend on the other rows, so these are exactly the whole tensor's. The loss is then
    ``nll_loss`` over all positions in their order, the reduction ``cross_entropy`` (= ``nll_loss(log_softmax)``)
    runs on the whole tensor, so it sums the same terms in the same order: the same float, not a re-derived mean."""
    picked, hits = [], []
    for i in range(0, len(data), batch_size):
        logits = model(torch.from_numpy(data.x[i : i + batch_size]).to(device))  # (B, L, V)
        y = torch.from_numpy(data.y[i : i + batch_size]).to(device)
        flat, target = logits.reshape(-1, logits.shape[-1]), y.reshape(-1, 1)
        rows = max(1, EVAL_CHUNK_BYTES // (flat.shape[1] * flat.element_size()))
        for a in range(0, len(flat), rows):
            picked.append(torch.log_softmax(flat[a : a + rows], dim=-1).gather(1, target[a : a + rows]).squeeze(1).cpu())
        hits.append((logits.topk(5, dim=-1).indices == y.unsqueeze(-1)).any(-1).reshape(-1).cpu())
        del logits, flat
    y_all = torch.from_numpy(data.y).reshape(-1)
    logp = torch.cat(picked) if picked else torch.empty(0)
    # position p's term is logp[p] at class 1; class 0 marks a padding target, ignored as cross_entropy ignores it
    two = torch.stack([torch.zeros_like(logp), logp], dim=1)
    loss = float(nn.functional.nll_loss(two, (y_all != 0).long(), ignore_index=0))
    hit = torch.cat(hits) if hits else torch.empty(0, dtype=torch.bool)
    top5_acc = float(hit[y_all != 0].float().mean())
    return {"loss": loss, "top5": top5_acc, "utility": top5_acc}


def state_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's state as float numpy arrays on the CPU, keyed like its state_dict."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def load_arrays(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()})
