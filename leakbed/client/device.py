"""The device's handlers: FedAvg DeviceUpdate (seed 001, Algorithm 1) on its own private data.

A device learns which user it is from its SuperNode's ``node_config["partition-id"]``; each round's message
carries the device's plan (``core.plan``), decoded once by the outermost Mod (``client.plan``). The defenses
its user adopts change its training data, its training and the weights it sends (``client.defenses``). The
reply carries the weights and ``num-examples``; the user id travels in a separate ConfigRecord that the
server's shuffler removes before anything else looks at the reply. ``client.app`` assembles them into the
ClientApp; ``client.secagg`` trains through ``device_train`` under SecAgg+.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from leakbed.client.adversary import adversary_round
from leakbed.client.batch_truth import batch_truth
from leakbed.client.defenses import apply_data, defense_mod, training
from leakbed.client.plan import CONFIG, current
from leakbed.client.user_facts import user_facts
from leakbed.core.derive import node_ticket
from leakbed.core.models import build_model
from leakbed.core.plan import TICKET_KEY
from leakbed.core.property_plan import planned_data
from leakbed.core.training import evaluate, local_update, pick_device

TRUTH_KEY = "leakbed-truth"
DEVICE_MODS = [defense_mod]  # behind the plan (and SecAgg+'s hand-over): the adopted defenses' Mods


def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    device = current()
    plan, fed, pid, user = device.plan, device.federation, device.partition, device.user
    model = build_model(plan.model, fed.corpus)
    model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict())
    own = planned_data(plan.data.property_plan, plan.seed, fed.user_ids, user, fed.private(pid), device.round)
    data = apply_data(device, own)
    tcfg = device.train
    if tcfg is None:
        raise ValueError("a train message without the training keys")
    seed = zlib.crc32(f"{plan.seed}/{device.round}/{pid}/device".encode())
    torch.manual_seed(seed)
    adversarial: dict[str, object] = {}  # an adversarial participant's scores, sealed for the referee
    with training(device, model):
        if user in plan.adversary.users:
            loss, adversarial = adversary_round(device, model, seed, context.state)
        else:
            loss = local_update(model, data, fed.corpus.task, tcfg, seed=seed, device=pick_device(plan.device))
    content = RecordDict(
        {
            "arrays": ArrayRecord(model.cpu().state_dict()),
            "metrics": MetricRecord({"num-examples": len(data), "train-loss": loss}),
            TRUTH_KEY: ConfigRecord(
                {
                    "user-id": user,
                    **batch_truth(data, tcfg, seed, records=plan.records),
                    **user_facts(fed.private(pid), fed.corpus),
                    **adversarial,
                }
            ),
        }
    )
    return Message(content=content, reply_to=msg)


def device_train(msg: Message, context: Context) -> Message:
    """The device's train handler behind its Mods, as the ClientApp runs it (inside the plan of the
    message); the SecAgg+ device calls it so that the same local training, defenses and truth apply there."""
    call = train
    for mod in reversed(DEVICE_MODS):
        call = functools.partial(_through, mod, call)
    return call(msg, context)


def _through(mod: Callable, call_next: ClientAppCallable, msg: Message, context: Context) -> Message:
    return mod(msg, context, call_next)


def evaluate_local(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    device = current()
    fed = device.federation
    model = build_model(device.plan.model, fed.corpus)
    model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict())
    data = fed.splits[device.user].test
    metrics = evaluate(model, data, fed.corpus.task, device=pick_device(device.plan.device)) if len(data) else {"utility": 0.0}
    return Message(content=RecordDict({"metrics": MetricRecord({"num-examples": len(data), **metrics})}), reply_to=msg)


def ticket(msg: Message, context: Context) -> Message:
    """This device's sampling ticket: a function of the run's ticket seed and its partition only."""
    seed = int(msg.content.config_records[CONFIG][TICKET_KEY])
    value = node_ticket(seed, int(context.node_config["partition-id"]))
    return Message(content=RecordDict({CONFIG: ConfigRecord({"ticket": str(value)})}), reply_to=msg)
