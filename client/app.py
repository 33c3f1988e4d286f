"""The device: FedAvg DeviceUpdate (seed 001, Algorithm 1) on its own private data.

The same ClientApp serves the Ray simulation and the Deployment Engine. A device learns which
user it is from its SuperNode's ``node_config["partition-id"]``; the experiment config arrives
with each round's training config, so simulation and deployment build the same federation.
Data-level defenses the user adopts change its training data; update-level ones (a Mod) change
the weights it sends. The reply carries the weights and ``num-examples``; the user id travels in a
separate ConfigRecord that the server's shuffler removes before anything else looks at the reply.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable

from client.adversary import adversary_round, is_adversary
from client.batch_truth import batch_truth, needs_records
from client.user_facts import user_facts
from core.config import ExperimentConfig
from core.data import Federation, federation
from core.models import build_model
from core.property_plan import planned_data
from core.training import TrainConfig, evaluate, local_update, pick_device
from defenses.augment import apply_data_defenses
from defenses.count_report import metadata_mod
from defenses.dp import dp_mod
from defenses.dropout import device_dropout, dropout_during
from defenses.update_mods import update_defense_mod
from defenses.vocabulary import restrict_vocabulary, vocab_mod

TRUTH_KEY = "leakbed-truth"
SECAGG_CONFIGS = "secaggplus_configs"  # the record every SecAgg+ stage message carries (flwr's RECORD_KEY_CONFIGS)

# Outermost first: DP clips (and noises) what the update-level defenses leave; vocab acts on the raw update;
# the metadata defenses (count reports, norm clipping) act on what the update-level defenses leave.
DEVICE_MODS = [dp_mod, metadata_mod, update_defense_mod, vocab_mod]


def secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Under ``fl.secure_aggregation = 'secagg+'`` the server runs Flower's legacy SecAgg+ workflow,
    whose messages carry its stage record: hand them to the SecAgg+ device (``client.secagg``, which
    trains through ``device_train`` below, Mods included), so ``flwr run`` serves both loops."""
    if msg.metadata.message_type == "train" and SECAGG_CONFIGS in msg.content.config_records:
        from client.secagg import app as secagg_app  # imported here: client.secagg trains through this module

        return secagg_app(msg, context)
    return call_next(msg, context)


app = ClientApp(mods=[secagg_mod, *DEVICE_MODS])


def _setup(msg: Message, context: Context) -> tuple[ExperimentConfig, Federation, int, torch.nn.Module]:
    conf = msg.content.config_records["config"]
    cfg = ExperimentConfig.model_validate_json(str(conf["experiment"]))
    rule = str(conf["prior-rule"])
    pid = int(context.node_config["partition-id"])
    fed = federation(cfg, rule)
    if not 0 <= pid < len(fed.user_ids):
        raise ValueError(f"partition-id {pid} outside the federation's {len(fed.user_ids)} users")
    model = build_model(cfg.model, fed.corpus)
    model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict())
    return cfg, fed, pid, model


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    cfg, fed, pid, model = _setup(msg, context)
    conf = msg.content.config_records["config"]
    own = planned_data(cfg, fed.user_ids, fed.user_ids[pid], fed.private(pid), int(conf["server-round"]))
    data = apply_data_defenses(cfg, fed, fed.user_ids[pid], own)
    data = restrict_vocabulary(cfg, fed, fed.user_ids[pid], data)
    tcfg = TrainConfig(
        int(conf["epochs"]),
        int(conf["batch_size"]),
        float(conf["lr"]),
        str(conf["optimizer"]),
        float(conf["momentum"]),
        int(conf.get("steps", cfg.fl.local_steps)),
    )
    seed = zlib.crc32(f"{cfg.seed}/{conf['server-round']}/{pid}/device".encode())
    torch.manual_seed(seed)
    adversarial: dict[str, object] = {}  # an adversarial participant's scores, sealed for the referee
    with dropout_during(model, device_dropout(cfg, fed.user_ids, fed.user_ids[pid])):
        if is_adversary(cfg, fed.user_ids[pid]):
            rnd, device = int(conf["server-round"]), pick_device(cfg.device)
            loss, adversarial = adversary_round(
                cfg, fed, pid, model, tcfg, rnd=rnd, seed=seed, device=device, state=context.state
            )
        else:
            loss = local_update(model, data, fed.corpus.task, tcfg, seed=seed, device=pick_device(cfg.device))
    content = RecordDict(
        {
            "arrays": ArrayRecord(model.cpu().state_dict()),
            "metrics": MetricRecord({"num-examples": len(data), "train-loss": loss}),
            TRUTH_KEY: ConfigRecord(
                {
                    "user-id": fed.user_ids[pid],
                    **batch_truth(data, tcfg, seed, records=needs_records(cfg.attack.suite)),
                    **user_facts(fed.private(pid), fed.corpus),
                    **adversarial,
                }
            ),
        }
    )
    return Message(content=content, reply_to=msg)



def device_train(msg: Message, context: Context) -> Message:
    """The device's train handler behind its Mods, as the ClientApp runs it; the SecAgg+ device calls
    it so that the same local training, data- and update-level defenses and truth record apply there."""
    call = train
    for mod in reversed(DEVICE_MODS):
        call = functools.partial(_through, mod, call)
    return call(msg, context)


def _through(mod: Callable, call_next: ClientAppCallable, msg: Message, context: Context) -> Message:
    return mod(msg, context, call_next)


@app.evaluate()
def evaluate_local(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    cfg, fed, pid, model = _setup(msg, context)
    data = fed.splits[fed.user_ids[pid]].test
    metrics = evaluate(model, data, fed.corpus.task, device=pick_device(cfg.device)) if len(data) else {"utility": 0.0}
    return Message(content=RecordDict({"metrics": MetricRecord({"num-examples": len(data), **metrics})}), reply_to=msg)
