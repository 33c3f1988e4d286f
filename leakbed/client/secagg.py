"""The device under Flower's SecAgg+ (legacy API): a NumPyClient around the plain device, with
``secaggplus_mod`` masking its weighted parameters so the server only learns the sum.

Flower (1.42 too) offers SecAgg+ only with the legacy workflow (``SecAggPlusWorkflow``), a
``NumPyClient`` and the legacy strategies. ``fit`` runs the plain ClientApp's own train handler
behind its Mods (``client.device.device_train``): the same local training, data-level defenses,
update-level Mods (noise, selective sharing, local DP, vocabulary) and truth record as without
SecAgg+, so one behaviour holds in every mode. The truth facts travel as plaintext fit metrics,
which the server's first stage seals for the referee and strips before the strategy looks - as
the truth record does in the plain path. ``client.app:app`` hands SecAgg+ messages to ``app``
here, so ``flwr run`` needs no second ClientApp.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, Metadata, RecordDict
from flwr.client import Client, ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod

from leakbed.client.device import TRUTH_KEY, device_train
from leakbed.client.plan import CONFIG, DeviceRound, handling
from leakbed.core.derive import derived_seed
from leakbed.core.models import build_model
from leakbed.core.plan import PLAN_KEY, DevicePlan
from leakbed.core.training import TrainConfig

TRUTH_PREFIX = "leakbed-truth-"  # fit-metric keys the server seals and strips before aggregation


def _names(device: DeviceRound) -> list[str]:
    """The model's parameter names, in the order the legacy workflow sends the arrays."""
    return list(build_model(device.plan.model, device.federation.corpus).state_dict())


def seed_quantization(seed: int, rnd: int, partition_id: int) -> None:
    """SecAgg+ quantizes a reply by stochastic rounding on NumPy's global generator (flwr's
    ``quantization._stochastic_round``), right after ``fit`` returns; unseeded, the same experiment
    gave different aggregates, models and AUCs from run to run. Seeded per device and round, one-way
    from the experiment seed (the masks still come from the OS and cancel in the sum)."""
    state = np.random.SeedSequence([derived_seed(seed, "secagg"), rnd, partition_id]).generate_state(1)[0]
    np.random.seed(int(state))


class SecAggDevice(NumPyClient):
    """One user's device: the plain device's training and Mods on the legacy workflow's arrays."""

    def __init__(self, partition_id: int, context: Context | None = None) -> None:
        self.pid = partition_id
        self.ctx = context or Context(
            run_id=0, node_id=0, node_config={"partition-id": partition_id}, state=RecordDict(), run_config={}
        )

    def fit(self, parameters: list[np.ndarray], config: dict) -> tuple[list[np.ndarray], int, dict]:
        plan = DevicePlan.model_validate_json(str(config[PLAN_KEY]))  # the message's one validation
        device = DeviceRound(plan, self.pid, int(config["server-round"]), TrainConfig.from_config(config))
        names = _names(device)
        state = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in zip(names, parameters, strict=True)}
        meta = Metadata(
            run_id=self.ctx.run_id,
            message_id=f"secagg-fit-{config['server-round']}",
            src_node_id=0,
            dst_node_id=self.ctx.node_id,
            reply_to_message_id="",
            group_id=str(config["server-round"]),
            created_at=time.time(),
            ttl=86_400.0,
            message_type="train",
        )
        msg = Message(content=RecordDict({"arrays": ArrayRecord(state), CONFIG: ConfigRecord(dict(config))}), metadata=meta)
        with handling(device):
            reply = device_train(msg, self.ctx)
        if reply.has_error():
            raise RuntimeError(f"device training failed: {reply.error.reason}")
        arrays = reply.content.array_records["arrays"]
        metrics = reply.content.metric_records["metrics"]
        truth = reply.content.config_records[TRUTH_KEY]
        scalars = {k: v for k, v in truth.items() if isinstance(v, bool | int | float | str)}  # lists stay out of fit metrics
        out = {"train-loss": float(metrics["train-loss"]), **{f"{TRUTH_PREFIX}{k}": v for k, v in scalars.items()}}
        seed_quantization(plan.seed, device.round, self.pid)
        return [arrays[k].numpy() for k in names], int(metrics["num-examples"]), out


def client_fn(context: Context) -> Client:
    return SecAggDevice(int(context.node_config["partition-id"]), context).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
