"""SecAgg+ (Flower's legacy workflow) end to end in the Ray simulation: the server sees only each
round's aggregate, which equals the plain FedAvg mean of the same devices' updates; attacks that
need individual updates report that they cannot run; aggregate-level property inference is scored."""

import json

import numpy as np
import pytest

from client.secagg import SecAggDevice
from core.layout import RunLayout
from core.store import UpdateStore
from leakbed.simulate import simulate
from server.run_parts import train_config
from server.secagg import CANNOT_RUN
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # a Ray simulation


def test_secagg_hides_updates_and_keeps_the_aggregate(tmp_path):
    cfg = tiny_config(
        "fl.secure_aggregation='secagg+'",
        "fl.secagg.max_weight=100",  # close to the devices' sizes: quantization error ≈ 2·clip/Q / (Σn/max_weight)
        "fl.rounds=2",
        "fl.round_timeout=120",  # SecAgg+ stages wait this long: a crashed simulation fails fast instead of hanging
        "fl.fraction_train=0.5",
        "data.property_plan.holder_fraction=0.34",
        'attack.attackers=["knn"]',
        'attack.suite=["aggregate-property", "property"]',
        "attack.property.aux_updates=2",
        'split.priors=["random"]',
    )
    run = simulate(cfg, "random", tmp_path)
    assert run["secure_aggregation"] == "secagg+"
    assert run["attackers"] == {}
    assert run["attackers_failed"] == {"knn": CANNOT_RUN, "property": CANNOT_RUN}
    agg = run["suite"]["aggregate-property"]
    assert agg["aggregates"] == 2 and agg["participants_mean"] == 3.0

    layout = RunLayout(tmp_path)
    truth = [json.loads(line) for line in (layout.referee("random") / "truth.jsonl").read_text().splitlines()]
    assert [t["round"] for t in truth] == [1, 2] and all(t["participants"] == 3 for t in truth)
    # the aggregate of round 1 is the num_examples-weighted mean of the participants' own updates
    store = UpdateStore(layout.store("random"))
    before, after = store.read_global(1), store.read_global(2)
    names = list(before)
    config = {**dict(train_config(cfg, "random").items()), "server-round": 1}
    users = truth[0]["user_id"].removeprefix("aggregate:").split()
    outs = [SecAggDevice(int(u.removeprefix("user"))).fit([before[k] for k in names], config) for u in users]
    weights = np.asarray([n for _, n, _ in outs], float)
    for i, k in enumerate(names):
        mean = sum(w * o[0][i] for w, o in zip(weights, outs, strict=True)) / weights.sum()
        np.testing.assert_allclose(after[k], mean, atol=5e-5)  # SecAgg+ quantizes to 2·8/2^22 steps
    assert not np.allclose(after[names[0]], before[names[0]])
    report = (layout.results("random") / "metrics.json").read_text()
    assert "cannot run: secure aggregation hides individual updates" in report
