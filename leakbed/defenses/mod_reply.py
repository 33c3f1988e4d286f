"""What every update-level defense Mod does around its own rule: tell a train reply from anything else,
take the global and the trained weights as arrays, send back the defended weights, and keep chosen
entries at the global value (so those entries of Δw are exactly zero)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp.typing import ClientAppCallable, Mod

Weights = dict[str, np.ndarray]


def is_train_reply(msg: Message, reply: Message) -> bool:
    """A successful reply to a train message (the only replies a defense changes)."""
    return msg.metadata.message_type == "train" and not reply.has_error()


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


def reply_mod(defend: Callable[[Weights, Weights], Weights]) -> Mod:
    """A Mod that sends ``defend(global, trained)`` instead of the trained weights of a train reply."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        if not is_train_reply(msg, reply):
            return reply
        return send(reply, defend(*weights(msg, reply)))

    return mod
