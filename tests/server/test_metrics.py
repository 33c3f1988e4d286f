"""Server metrics: the catalogue as exported, promtool on a real scrape, bounded labels, pool counters."""

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from leakbed.core import telemetry
from leakbed.core.config import build_config
from leakbed.server.metrics import RunTelemetry, defense_label, observe_round
from leakbed.server.tap import RoundLog
from leakbed.workers import PoolStats

CATALOGUE = {
    "leakbed_attack_sandboxed", "leakbed_round", "leakbed_rounds_planned", "leakbed_run_finished",
    "leakbed_updates_received_total",
    "leakbed_updates_failed_total", "leakbed_updates_tapped_total", "leakbed_updates_analysed_total",
    "leakbed_updates_dropped_total", "leakbed_round_duration_seconds", "leakbed_aggregation_duration_seconds",
    "leakbed_attack_queue_depth", "leakbed_attack_lag_rounds", "leakbed_utility", "leakbed_attack_ap",
    "leakbed_attack_x_chance", "leakbed_attack_top1", "leakbed_attack_auc", "leakbed_attack_sample_accuracy",
    "leakbed_attack_count_accuracy", "leakbed_privacy_epsilon", "leakbed_privacy_flagged", "leakbed_worker_tasks_total",
    "leakbed_worker_task_duration_seconds", "leakbed_worker_updates_stored_total", "leakbed_worker_duplicates_total",
}  # fmt: skip
ALLOWED_LABELS = {"prior", "attack", "defense", "world", "scorer", "reason", "kind", "outcome", "le", "estimate", "view"}


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_exported_names_are_the_catalogue():
    assert set(telemetry.metric_names()) == CATALOGUE


def test_the_first_metric_says_whether_the_attack_code_ran_confined(tmp_path):
    """The exposition's first lines: whether the attack side was sandboxed (0 = the honest fallback's warning)."""
    tel = RunTelemetry(build_config({}, []), "random")
    tel.confined(False)
    families = list(text_string_to_metric_families(telemetry.exposition(telemetry.SERVER_REGISTRY)))
    assert families[0].name == "leakbed_attack_sandboxed"
    assert [s.value for s in families[0].samples if s.labels == {"prior": "random"}] == [0.0]
    tel.confined(True)
    assert telemetry.SERVER_REGISTRY.get_sample_value("leakbed_attack_sandboxed", {"prior": "random"}) == 1.0


def test_a_scrape_carries_a_runs_state_and_passes_promtool(tmp_path):
    cfg = build_config({}, ["fl.rounds=4", 'defenses=[{name="noise", variance=0.01}]'])
    tel = RunTelemetry(cfg, "chrono")
    observe_round(
        tel, 1, RoundLog(sampled=5, received=4, failed=1, rejected=1, seconds=2.5, aggregation_seconds=0.2),
        PoolStats(tapped=2, analysed=1, lag_rounds=1), depth=3,
    )  # fmt: skip
    tel.utility(0.42)
    tel.attack("mlp", {"ap": 0.5, "x_chance": 12.0, "top1": 0.4, "per_round": {1: {"ap": 0.3}}})
    tel.attack("property", {"auc": 0.81})
    tel.finished(tmp_path)
    endpoint = telemetry.start_http_server(0, registry=telemetry.SERVER_REGISTRY)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        endpoint.close()
    s = _samples(text)
    p = frozenset({("prior", "chrono")})
    assert s[("leakbed_round", p)] == 1 and s[("leakbed_rounds_planned", p)] == 4 and s[("leakbed_run_finished", p)] == 1
    assert s[("leakbed_updates_received_total", p)] == 4 and s[("leakbed_updates_tapped_total", p)] == 2
    # (the strategy counts error replies and sampled devices that never answered as failed)
    assert s[("leakbed_updates_failed_total", p | {("reason", "error")})] == 1
    assert s[("leakbed_updates_failed_total", p | {("reason", "rejected")})] == 1
    assert s[("leakbed_round_duration_seconds_sum", p)] == 2.5 and s[("leakbed_attack_lag_rounds", p)] == 1
    assert s[("leakbed_utility", p | {("defense", "noise")})] == pytest.approx(0.42)
    mlp = p | {("attack", "mlp"), ("defense", "noise"), ("world", "closed"), ("scorer", "referee")}
    assert s[("leakbed_attack_ap", mlp)] == 0.5 and s[("leakbed_attack_x_chance", mlp)] == 12
    assert s[("leakbed_attack_top1", mlp)] == 0.4
    prop = p | {("attack", "property"), ("defense", "noise"), ("world", "closed"), ("scorer", "referee")}
    assert s[("leakbed_attack_auc", prop)] == 0.81
    assert ("leakbed_attack_ap", prop) not in s
    assert {k for _, labels in s for k, _ in labels} <= ALLOWED_LABELS
    assert (tmp_path / "metrics.prom").read_text().count('leakbed_run_finished{prior="chrono"} 1.0') == 1
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (CI installs it): exposition checked by the parser only")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_pool_counts_become_counter_increments():
    tel = RunTelemetry(build_config({}), "random-incr")
    tel.pool(PoolStats(tapped=3, analysed=1, dropped=1), depth=2)
    tel.pool(PoolStats(tapped=5, analysed=4, dropped=1, failed=1), depth=0)
    reg, p = telemetry.SERVER_REGISTRY, {"prior": "random-incr"}
    assert reg.get_sample_value("leakbed_updates_tapped_total", p) == 5
    assert reg.get_sample_value("leakbed_updates_analysed_total", p) == 4
    assert reg.get_sample_value("leakbed_updates_dropped_total", p) == 1
    assert reg.get_sample_value("leakbed_updates_failed_total", {**p, "reason": "error"}) == 1
    assert reg.get_sample_value("leakbed_attack_queue_depth", p) == 0


def test_a_second_run_in_the_same_process_counts_from_zero():
    reg, p = telemetry.SERVER_REGISTRY, {"prior": "random-again"}
    first = RunTelemetry(build_config({}), "random-again")
    observe_round(first, 1, RoundLog(sampled=4, received=4, seconds=1.0), PoolStats(tapped=4, analysed=4), depth=0)
    first.attack("mlp", {"ap": 0.9})
    other = RunTelemetry(build_config({}), "chrono-untouched")
    other.pool(PoolStats(tapped=7), depth=0)
    second = RunTelemetry(build_config({}), "random-again")
    observe_round(second, 1, RoundLog(sampled=3, received=3, seconds=2.0), PoolStats(tapped=3, analysed=2), depth=1)
    assert reg.get_sample_value("leakbed_updates_received_total", p) == 3
    assert reg.get_sample_value("leakbed_updates_tapped_total", p) == 3
    assert reg.get_sample_value("leakbed_round_duration_seconds_count", p) == 1
    assert reg.get_sample_value("leakbed_round_duration_seconds_sum", p) == 2.0
    assert reg.get_sample_value("leakbed_attack_ap", {**p, "attack": "mlp", "defense": "none", "world": "closed",
                                                      "scorer": "referee"}) is None
    assert reg.get_sample_value("leakbed_updates_tapped_total", {"prior": "chrono-untouched"}) == 7


def test_defense_label_is_short_and_bounded():
    assert defense_label(build_config({})) == "none"
    two = build_config({}, ['defenses=[{name="mm-aug"}, {name="noise", variance=0.1, fraction=0.5}]'])
    assert defense_label(two) == "mm-aug+noise"


def test_the_audit_exports_each_estimate_under_bounded_labels():
    tel = RunTelemetry(build_config({}, ['defenses=[{name="dp-fedavg", noise_multiplier=1.0, clip=0.5}]']), "random")
    view = {"epsilon_emp": 7.5, "interval": [6.0, 9.5], "epsilon_lower_bound": 1.25, "lower_bound_ceiling": 3.0}
    tel.audit({"epsilon_accountant": 9.0, "epsilon_exact": 8.5, "epsilon_poisson_approximation": 2.0, "flagged": False,
               "all iterates": view, "final model": view, "all iterates (max)": view})  # fmt: skip
    got = {(s.labels["estimate"], s.labels["view"]): s.value
           for fam in text_string_to_metric_families(telemetry.exposition(telemetry.SERVER_REGISTRY))
           if fam.name == "leakbed_privacy_epsilon" for s in fam.samples if s.labels["prior"] == "random"}  # fmt: skip
    per_view = {"emp": 7.5, "emp-lower": 6.0, "emp-upper": 9.5, "lower-bound": 1.25, "lower-bound-ceiling": 3.0}
    views = ("all-iterates", "final-model", "all-iterates-max")
    assert got == {("accountant", "mechanism"): 9.0, ("exact", "mechanism"): 8.5, ("poisson-approximation", "mechanism"): 2.0,
                   **{(e, v): x for v in views for e, x in per_view.items()}}  # fmt: skip
    flagged = {"prior": "random", "defense": "dp-fedavg"}
    assert telemetry.SERVER_REGISTRY.get_sample_value("leakbed_privacy_flagged", flagged) == 0.0
    tel.audit({"epsilon_accountant": None, "flagged": True, "all iterates": view})  # no DP defense: no finite guarantee
    assert telemetry.SERVER_REGISTRY.get_sample_value(
        "leakbed_privacy_epsilon", {"prior": "random", "defense": "dp-fedavg", "estimate": "accountant", "view": "mechanism"}
    ) == float("inf")
    assert telemetry.SERVER_REGISTRY.get_sample_value("leakbed_privacy_flagged", flagged) == 1.0


def test_a_plugin_scorers_numbers_are_marked_and_its_exports_cannot_touch_another_attack(tmp_path):
    """A plugin-scored attack whose scorer exports rows named after other attacks (``knn``, ``metadata``), a path
    (``../x``), a label breaker (quotes, a newline, braces), and huge or non-finite values: kNN's and metadata's own
    series keep their values, every plugin series is ``scorer="plugin"`` under the plugin's own name."""
    tel = RunTelemetry(build_config({}), "random-plugin")
    tel.attack("knn", {"ap": 0.25, "x_chance": 1.5, "top1": 0.2})
    tel.attack("metadata", {"ap": 0.3, "exports": {"metadata+knn": {"ap": 0.35}}})
    tel.attack("evil", {"ap": 0.9, "scored_by": "plugin", "exports": {
        "knn": {"ap": 1.0, "x_chance": 99.0, "top1": 1.0}, "metadata": {"ap": 1.0}, "../x": {"ap": 1.0},
        'x"} 1\nleakbed_attack_ap{attack="knn': {"ap": 1.0}, "huge": {"ap": 10**400, "top1": float("nan")}}})
    tel.finished(tmp_path)
    text = (tmp_path / "metrics.prom").read_text()
    s = _samples(text)
    base = {("prior", "random-plugin"), ("defense", "none"), ("world", "closed")}
    ap = {dict(labels)["attack"]: (dict(labels)["scorer"], v) for (name, labels), v in s.items()
          if name == "leakbed_attack_ap" and ("prior", "random-plugin") in labels}  # fmt: skip
    assert ap["knn"] == ("referee", 0.25) and ap["metadata"] == ("referee", 0.3) and ap["metadata+knn"] == ("referee", 0.35)
    assert s[("leakbed_attack_x_chance", frozenset(base | {("attack", "knn"), ("scorer", "referee")}))] == 1.5
    plugin = {a: v for a, v in ap.items() if v[0] == "plugin"}
    assert set(plugin) == {"evil", "evil/knn", "evil/metadata", "evil/../x", "evil/x___1_leakbed_attack_ap_attack__knn"}
    assert all(a == "evil" or a.startswith("evil/") for a in plugin) and plugin["evil"] == ("plugin", 0.9)
    assert ("leakbed_attack_ap", frozenset(base | {("attack", "evil/huge"), ("scorer", "plugin")})) not in s
    assert text.count('attack="knn"') == 3  # ap, x_chance, top1 of kNN itself: no other series names knn
