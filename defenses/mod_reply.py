"""What every update-level defense Mod does around its own rule: read the round's config and the
device's user, take the global and the trained weights as arrays, send back the defended weights,
and keep chosen entries at the global value (so those entries of Δw are exactly zero)."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message

from core.adoption import defenses_of
from core.config import DefenseConfig, ExperimentConfig
from core.data import Federation, federation


def train_config(msg: Message, reply: Message) -> tuple[ExperimentConfig, ConfigRecord] | None:
    """The experiment and round config of a successful train reply; None for anything else."""
    if msg.metadata.message_type != "train" or reply.has_error():
        return None
    conf = msg.content.config_records["config"]
    return ExperimentConfig.model_validate_json(str(conf["experiment"])), conf


def device_user(cfg: ExperimentConfig, conf: ConfigRecord, context: Context) -> tuple[Federation, str]:
    """The federation of this round's prior rule and the user this device (its partition id) holds."""
    fed = federation(cfg, str(conf["prior-rule"]))
    return fed, fed.user_ids[int(context.node_config["partition-id"])]


def adopted(
    msg: Message, context: Context, names: tuple[str, ...]
) -> tuple[ExperimentConfig, ConfigRecord, str, list[DefenseConfig]] | None:
    """For a train message: (experiment, round config, this device's user, the defenses among
    ``names`` that user adopts, in config order). None for other messages and for experiments that
    use none of ``names``, so a Mod that does nothing builds no federation."""
    if msg.metadata.message_type != "train":
        return None
    conf = msg.content.config_records["config"]
    cfg = ExperimentConfig.model_validate_json(str(conf["experiment"]))
    if not any(d.name in names for d in cfg.defenses):
        return None
    fed, user = device_user(cfg, conf, context)
    return cfg, conf, user, [d for _, d in defenses_of(cfg, fed.user_ids, user) if d.name in names]


def weights(msg: Message, reply: Message) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(global weights the server sent, weights the device trained)."""
    glob = {k: v.numpy() for k, v in msg.content.array_records["arrays"].items()}
    local = {k: v.numpy() for k, v in reply.content.array_records["arrays"].items()}
    return glob, local


def send(reply: Message, arrays: dict[str, np.ndarray]) -> Message:
    """Replace the reply's weights with ``arrays``."""
    reply.content["arrays"] = ArrayRecord(
        torch_state_dict={k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    )
    return reply


def keep_global(local: np.ndarray, glob: np.ndarray, send_mask: np.ndarray) -> np.ndarray:
    """The local value where ``send_mask`` holds (it broadcasts), the global value elsewhere."""
    return np.where(send_mask, local, glob)
