"""The empirical privacy audit in a live run (the real ServerApp, ClientApps in Ray, the attack lanes): DP-FedAvg
at clip 0.5 and z = 1.0 as leakbed/configs/audit.toml has it, at a smaller scale (8 users, every device every round,
4 rounds, 64 candidate canaries). The audit must land in metrics.json, the report, the console's table and the
Prometheus exposition, each view with its interval; the honest run is not flagged; the canaries must not reach the
attacks (the pool tapped exactly the real devices' replies) nor be counted as users; the DP noise secret is the
referee's, kept beside its truth, never in the config, and handing it back reproduces the run exactly.

The run is given a fixed noise secret (as ``leakbed run --noise-from`` gives a kept one) so that its numbers are the
same on every run of the suite: with a fresh secret from the OS, an honest mechanism's 90% interval lies wholly above
the accountant's ε in a few percent of runs (a view's one-sided 5%), and CI saw one. How often that happens over many
secrets is what ``leakbed.reference.audit_coverage`` measures; the OS draw itself is tests/referee/test_noise.py's."""

import json
import stat

import pytest

from leakbed.core.audit import VIEWS
from leakbed.core.layout import RunLayout
from leakbed.referee.noise import NOISE_FILE, give_secret, hand_back
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
SECRET = 0xC0FFEE_1EAC_BED0_0000_0000_0000_0029  # 128 bits; its run's 90% intervals lie below the accountant's ε


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    give_secret(RunLayout(out).referee("random"), SECRET)  # where the referee keeps the one it draws
    run = simulate(tiny_config(*AUDITED), "random", out)
    write_report(out)
    return out, run


def test_the_audit_is_in_metrics_report_and_exposition(audited):
    out, run = audited
    audit = run["audit"]
    assert audit["candidates"] == 64 and 20 <= audit["inserted"] <= 44 and audit["per_round"] == audit["inserted"]
    assert audit["rounds_observed"] == 4 and audit["norm"] == 0.5 * 1e4 and audit["defense"] == "dp-fedavg"
    [row] = run["privacy"]
    eps, exact = audit["epsilon_accountant"], audit["epsilon_exact"]
    assert eps == pytest.approx(row["epsilon"]) and 5 < exact < eps < 40 and exact == pytest.approx(row["epsilon_exact"])
    assert row["averaged_per_round"] == 8 + audit["per_round"]  # the noise Flower adds: z·clip over every reply
    assert row["noise_std_on_average"] == pytest.approx(1.0 * 0.5 / row["averaged_per_round"])
    assert not audit["flagged"]
    for view in VIEWS:
        est = audit[view]
        lo, hi = est["interval"]
        assert lo <= est["epsilon_emp"] <= hi and not est["above_accountant"]
        assert est["inserted"] + est["held_out"] == 64
        assert est["epsilon_lower_bound"] <= est["lower_bound_ceiling"] < eps
        assert est["mean_inserted"] > est["mean_held_out"]  # the canaries' signal is there
    assert "epsilon_poisson_approximation" not in audit  # C = 1: nothing sampled
    report = (out / "report.md").read_text()
    assert "## Empirical privacy audit" in report and "Steinke" in report and "[90% interval]" in report
    assert f"(exact {exact:.3g})" in report
    prom = (out / "random" / "metrics.prom").read_text()
    series = {line.split("{")[1].split("}")[0] for line in prom.splitlines() if line.startswith("leakbed_privacy_epsilon{")}
    for estimate in ("accountant", "exact", "emp", "emp-lower", "emp-upper", "lower-bound", "lower-bound-ceiling"):
        assert any(f'estimate="{estimate}"' in s for s in series), estimate
    assert 'leakbed_privacy_flagged{defense="dp-fedavg",prior="random"} 0.0' in prom


def test_the_canaries_stay_out_of_the_attacks_and_the_user_count(audited):
    _, run = audited
    real = run["replies"]["sampled"] - run["replies"]["failed"] - run["replies"]["rejected"]
    assert real == 8 * 4  # only the real devices' replies were sampled and counted
    assert run["pool"]["tapped"] == real  # the canaries never reached the tap
    assert run["replies"]["users"] == 8


def test_the_noise_secret_is_the_referees_and_not_the_configs(audited):
    out, _ = audited
    kept = out / "referee" / "random" / NOISE_FILE
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    secret = json.loads(kept.read_text())["noise_secret"]
    assert secret == SECRET  # the one it was given, kept, not redrawn
    assert str(secret) not in (out / "config.toml").read_text()
    assert not any(str(secret) in p.read_text(errors="ignore") for p in (out / "random").rglob("*") if p.is_file())


def test_the_frozen_config_and_the_combined_metrics_keep_the_audit(audited):
    out, run = audited
    assert "canaries = 64" in (out / "config.toml").read_text()
    assert json.loads((out / "metrics.json").read_text())["privacy_audit"]["random"] == json.loads(json.dumps(run["audit"]))


def test_the_kept_secret_reproduces_the_run_exactly(audited, tmp_path):
    """The same config and seed with the first run's kept noise secret handed back (``leakbed run --noise-from``):
    the same models round after round, the same scores and the same audit."""
    out, run = audited
    again = tmp_path / "again"
    hand_back(out, again, ["random"])
    rerun = simulate(tiny_config(*AUDITED), "random", again)
    assert rerun["utility"] == run["utility"]
    assert rerun["audit"] == run["audit"] and rerun["attackers"] == run["attackers"]
