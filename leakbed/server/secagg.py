"""SecAgg+ as the aggregate path of the run's one loop: the curious server sees only each round's aggregate
(issue 4; seed 002 §7.2.6-7.2.7 for what still leaks from aggregates).

Flower (1.42 too) offers SecAgg+ only as a legacy workflow (``SecAggPlusWorkflow``, a ``LegacyContext``
and a legacy strategy). This module is the one small adapter around it: ``SecAggGrid`` stands for the
run's Grid, and when the curious strategy's round of train messages reaches ``send_and_receive`` it
runs the SecAgg+ protocol for exactly that cohort and answers with one reply, the round's aggregate
(the num_examples-weighted mean, in the model's dtypes: SecAgg+ dequantizes to float64), marked as an
aggregate, with the devices' truth facts (plaintext fit metrics the protocol carries beside the masked
parameters) combined into one sealed record. Everything else (sampling, tapping, FedAvg, evaluation)
is the plain loop's. Attacks that need individual updates cannot run under it (``CANNOT_RUN``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.common import FitIns, FitRes, Parameters, parameters_to_ndarrays
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_manager import ClientManager, SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.serverapp import Grid

from leakbed.core.config import SecAggConfig
from leakbed.server.shuffler import AGGREGATE_KEY, TRUTH_KEY

TRUTH_PREFIX = "leakbed-truth-"  # the devices' fit-metric keys that carry their truth facts
CANNOT_RUN = "cannot run: secure aggregation hides individual updates"
_MAIN_PARAMS, _MAIN_CONFIG, _ROUND = "parameters", "config", "current_round"  # flwr.server.workflow.constant


class _Node(ClientProxy):
    """A node as the legacy workflow names it: only its id is used."""

    def __init__(self, node_id: int) -> None:
        super().__init__(str(node_id))
        self.node_id = node_id

    def get_properties(self, ins, timeout, group_id):  # noqa: ANN001, ANN201 - never called by SecAgg+
        raise NotImplementedError

    def get_parameters(self, ins, timeout, group_id):  # noqa: ANN001, ANN201
        raise NotImplementedError

    def fit(self, ins, timeout, group_id):  # noqa: ANN001, ANN201
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):  # noqa: ANN001, ANN201
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):  # noqa: ANN001, ANN201
        raise NotImplementedError


class _Round(LegacyStrategy):
    """The legacy strategy of one round: the cohort the curious strategy sampled, and the aggregate it gets back."""

    def __init__(self, nodes: list[int], config: dict) -> None:
        self._nodes = nodes
        self._config = config
        self.results: list[tuple[ClientProxy, FitRes]] = []
        self.failures: int = 0
        self.aggregate: list[np.ndarray] | None = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        return [(_Node(n), FitIns(parameters, dict(self._config))) for n in self._nodes]

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple[Parameters | None, dict]:
        self.results, self.failures = results, len(failures)
        if results:  # the workflow handed every result the unmasked weighted mean as its parameters
            self.aggregate = parameters_to_ndarrays(results[0][1].parameters)
        return (results[0][1].parameters if results else None), {}

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        return []

    def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple[float | None, dict]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> None:
        return None


class SecAggGrid:
    """The run's Grid, with each round of train messages answered by SecAgg+ as one aggregate reply."""

    def __init__(self, grid: Grid, secagg: SecAggConfig, round_timeout: float) -> None:
        self._grid = grid
        self._workflow = SecAggPlusWorkflow(
            num_shares=secagg.num_shares,
            reconstruction_threshold=secagg.reconstruction_threshold,
            max_weight=secagg.max_weight,
            clipping_range=secagg.clipping_range,
            quantization_range=secagg.quantization_range,
            timeout=round_timeout,
        )

    def __getattr__(self, name: str) -> object:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable[Message], timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        if not messages or messages[0].metadata.message_type != MessageType.TRAIN:
            return self._grid.send_and_receive(messages, timeout=timeout)
        return [self._aggregate(messages)]

    def _aggregate(self, messages: list[Message]) -> Message:
        content = messages[0].content  # every message of a round carries the same global model and config
        arrays = content.array_records["arrays"]
        config = {k: v for k, v in content.config_records["config"].items()}
        global_arrays = {k: v.numpy() for k, v in arrays.items()}
        round_ = _Round([m.metadata.dst_node_id for m in messages], config)
        legacy = LegacyContext(
            Context(run_id=messages[0].metadata.run_id, node_id=0, node_config={}, state=RecordDict(), run_config={}),
            config=ServerConfig(num_rounds=1),
            strategy=round_,
            client_manager=SimpleClientManager(),
        )
        legacy.state[_MAIN_PARAMS] = ArrayRecord({k: Array(np.asarray(v)) for k, v in global_arrays.items()})
        legacy.state[_MAIN_CONFIG] = ConfigRecord({_ROUND: int(config["server-round"])})
        self._workflow(self._grid, legacy)
        if round_.aggregate is None:  # the protocol halted: too few devices answered
            reason = f"secure aggregation halted: too few of the {len(messages)} sampled devices answered"
            return Message(Error(code=0, reason=reason), reply_to=messages[0])
        return _aggregate_reply(messages[0], global_arrays, round_)


def _aggregate_reply(first: Message, global_arrays: dict[str, np.ndarray], round_: _Round) -> Message:
    """The round's aggregate as one reply: the mean in the model's dtypes, the total example count, and the
    devices' truth facts combined into one record (who took part, whether any held the property)."""
    assert round_.aggregate is not None
    pairs = zip(global_arrays.items(), round_.aggregate, strict=True)
    mean = {k: np.asarray(a).astype(g.dtype, copy=False) for (k, g), a in pairs}
    facts = [{k[len(TRUTH_PREFIX) :]: v for k, v in r.metrics.items() if k.startswith(TRUTH_PREFIX)} for _, r in round_.results]
    has = [int(f.get("has-property", 0)) for f in facts]
    truth = {
        "user-id": "aggregate:" + " ".join(sorted(str(f.get("user-id", "?")) for f in facts)),
        "has-property": int(any(has)),
        "participants": len(facts),
        "holders": int(sum(has)),
    }
    n = sum(int(res.num_examples) for _, res in round_.results)
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in mean.items()}),
            "metrics": MetricRecord({"num-examples": n}),
            TRUTH_KEY: ConfigRecord(truth),
            AGGREGATE_KEY: ConfigRecord({"participants": len(facts), "dropouts": round_.failures}),
        }
    )
    return Message(content, reply_to=first)
