"""The ClientApp: the device's handlers (``client.device``) behind its Mods.

The same ClientApp serves the Ray simulation and the Deployment Engine. The outermost Mod decodes the
message's plan once (``client.plan``); SecAgg+ stage messages go to the SecAgg+ device (``client.secagg``),
which trains through the same handler and Mods; the adopted defenses' Mods wrap the train handler. A query
message asks for the device's sampling ticket (``core.derive.node_ticket``), by which the server samples
cohorts reproducibly.
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable

from leakbed.client import secagg
from leakbed.client.device import DEVICE_MODS, TRUTH_KEY, evaluate_local, ticket, train
from leakbed.client.plan import plan_mod

__all__ = ["TRUTH_KEY", "app", "train"]
SECAGG_CONFIGS = "secaggplus_configs"  # the record every SecAgg+ stage message carries (flwr's RECORD_KEY_CONFIGS)


def secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Under ``fl.secure_aggregation = 'secagg+'`` the server runs Flower's SecAgg+ workflow, whose messages carry
    its stage record: hand them to the SecAgg+ device, so one ClientApp serves both paths."""
    if msg.metadata.message_type == "train" and SECAGG_CONFIGS in msg.content.config_records:
        return secagg.app(msg, context)
    return call_next(msg, context)


app = ClientApp(mods=[plan_mod, secagg_mod, *DEVICE_MODS])
app.train()(train)
app.evaluate()(evaluate_local)
app.query()(ticket)
