"""The device under Flower's SecAgg+ (legacy API): a NumPyClient around the same local training,
with ``secaggplus_mod`` masking its weighted parameters so the server only learns the sum.

Flower 1.41 offers SecAgg+ only with the legacy workflow (``SecAggPlusWorkflow``), a
``NumPyClient`` and the legacy strategies. The truth facts (user id, property share of the
batches) travel as plaintext fit metrics, which the server's first stage seals for the referee
and strips before the strategy looks - as the truth record does in the plain path. Update-level
Mods (noise, DP clipping) are not applied here; data-level defenses and the property plan are.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch
from flwr.app import Context
from flwr.client import Client, ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod

from client.batch_truth import batch_truth
from core.config import ExperimentConfig
from core.data import federation
from core.models import build_model
from core.property_plan import planned_data
from core.training import TrainConfig, local_update, pick_device
from defenses.augment import apply_data_defenses

TRUTH_PREFIX = "leakbed-truth-"  # fit-metric keys the server seals and strips before aggregation


def _model_from(cfg: ExperimentConfig, fed, parameters: list[np.ndarray]) -> torch.nn.Module:  # noqa: ANN001
    model = build_model(cfg.model, fed.corpus)
    keys = list(model.state_dict())
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in zip(keys, parameters, strict=True)})
    return model


class SecAggDevice(NumPyClient):
    """One user's device: trains on its private data (the same DeviceUpdate as ``client.app``)."""

    def __init__(self, partition_id: int) -> None:
        self.pid = partition_id

    def fit(self, parameters: list[np.ndarray], config: dict) -> tuple[list[np.ndarray], int, dict]:
        torch.set_num_threads(1)
        cfg = ExperimentConfig.model_validate_json(str(config["experiment"]))
        fed = federation(cfg, str(config["prior-rule"]))
        if not 0 <= self.pid < len(fed.user_ids):
            raise ValueError(f"partition-id {self.pid} outside the federation's {len(fed.user_ids)} users")
        user = fed.user_ids[self.pid]
        rnd = int(config["server-round"])
        model = _model_from(cfg, fed, parameters)
        data = apply_data_defenses(cfg, fed, user, planned_data(cfg, fed.user_ids, user, fed.private(self.pid), rnd))
        tcfg = TrainConfig.from_config(config)
        seed = zlib.crc32(f"{cfg.seed}/{rnd}/{self.pid}/device".encode())
        torch.manual_seed(seed)
        loss = local_update(model, data, fed.corpus.task, tcfg, seed=seed, device=pick_device(cfg.device))
        facts = batch_truth(data, tcfg, seed, records=False)
        metrics = {"train-loss": loss, f"{TRUTH_PREFIX}user-id": user}
        metrics |= {f"{TRUTH_PREFIX}{k}": v for k, v in facts.items()}
        return [v.detach().cpu().numpy() for v in model.state_dict().values()], len(data), metrics


def client_fn(context: Context) -> Client:
    return SecAggDevice(int(context.node_config["partition-id"])).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
