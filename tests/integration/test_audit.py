"""The empirical privacy audit in a live run (the real ServerApp, ClientApps in Ray, the attack lanes): DP-FedAvg
at clip 0.5 and z = 1.0 as leakbed/configs/audit.toml has it, at a smaller scale (8 users, every device every round, 4
rounds, 64 candidate canaries). The audit must land in metrics.json, the report, the console's table and the
Prometheus exposition; its lower bound must stay below the accountant's ε; the canaries must not reach the attacks
(the pool tapped exactly the real devices' replies) nor be counted as users."""

import json

import pytest

from leakbed.report import write_report
from leakbed.simulate import simulate
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

AUDITED = [
    "data.synthetic.users=8",
    "data.synthetic.examples_per_user=60",
    "fl.rounds=4",
    "fl.fraction_train=1.0",
    'attack.suite=["knn"]',
    'defenses=[{name="dp-fedavg", clip=0.5, noise_multiplier=1.0}]',
    "audit.canaries=64",
]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    run = simulate(tiny_config(*AUDITED), "random", out)
    write_report(out)
    return out, run


def test_the_audit_is_in_metrics_report_and_exposition(audited):
    out, run = audited
    audit = run["audit"]
    assert audit["candidates"] == 64 and 20 <= audit["inserted"] <= 44 and audit["per_round"] == audit["inserted"]
    assert audit["rounds_observed"] == 4 and audit["norm"] == 0.5 and audit["defense"] == "dp-fedavg"
    eps = audit["epsilon_accountant"]
    assert eps == pytest.approx(run["privacy"][0]["epsilon"]) and 5 < eps < 40
    for view in ("all iterates", "final model"):
        est = audit[view]
        assert est["epsilon_lower_bound"] <= eps and not est["exceeds_accountant"]
        assert est["mean_inserted"] > est["mean_held_out"]  # the canaries' signal is there
    assert audit["all iterates"]["epsilon_andrew"] > 1.0
    assert audit["epsilon_accountant_amplified"] is not None  # C = 1: q = 1, the same as without amplification
    report = (out / "report.md").read_text()
    assert "## Empirical privacy audit" in report and "Steinke" in report
    prom = (out / "random" / "metrics.prom").read_text()
    lines = [line for line in prom.splitlines() if line.startswith("leakbed_privacy_epsilon{")]
    assert {"estimate=\"andrew\"", "estimate=\"lower-bound\"", "estimate=\"accountant\""} <= {
        part for line in lines for part in line.split("{")[1].split("}")[0].split(",") if part.startswith("estimate=")
    }


def test_the_canaries_stay_out_of_the_attacks_and_the_user_count(audited):
    _, run = audited
    real = run["replies"]["sampled"] - run["replies"]["failed"] - run["replies"]["rejected"]
    assert real == 8 * 4  # only the real devices' replies were sampled and counted
    assert run["pool"]["tapped"] == real  # the canaries never reached the tap
    assert run["replies"]["users"] == 8


def test_the_frozen_config_and_the_combined_metrics_keep_the_audit(audited):
    out, run = audited
    assert "canaries = 64" in (out / "config.toml").read_text()
    assert json.loads((out / "metrics.json").read_text())["privacy_audit"]["random"] == json.loads(json.dumps(run["audit"]))
