"""The Grafana dashboard, offline: valid JSON with the keys Grafana needs, every PromQL expression
parses, every metric and label it names is one the exporters register (core.telemetry)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from leakbed.core import telemetry
from tests.deploy.tools import DEPLOY

DASHBOARD = DEPLOY / "grafana/dashboards/leakbed.json"
DATASOURCES = DEPLOY / "grafana/provisioning/datasources/prometheus.yml"
PROVIDERS = DEPLOY / "grafana/provisioning/dashboards/leakbed.yml"
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}

promql = pytest.importorskip("promql_parser", reason="promql-parser comes with the test extra")


def exported() -> dict[str, set[str]]:
    """Every series name the exporters can produce -> its labels (counters as *_total, histograms as *_bucket/_sum/_count)."""
    names: dict[str, set[str]] = {}
    for value in vars(telemetry).values():
        if not isinstance(value, Counter | Gauge | Histogram):
            continue
        labels = set(value._labelnames)
        base = value._name
        if isinstance(value, Counter):
            names[f"{base}_total"] = labels
        elif isinstance(value, Histogram):
            for suffix in ("_bucket", "_sum", "_count"):
                names[base + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
        else:
            names[base] = labels
    return names


def test_catalogue_view_matches_the_registries() -> None:
    families = {re.sub(r"_total$", "", n) for n in telemetry.metric_names()}
    assert {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in exported()} == families


def substitute(expr: str, variables: list[str]) -> str:
    for key, value in GRAFANA_VARS.items():
        expr = expr.replace(key, value)
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", ".*").replace(f"${name}", ".*")
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def selectors(expr: str) -> list[tuple[str, list[str]]]:
    """(metric name, label names matched) of every vector selector in a PromQL expression; raises on a parse error."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: object, *_: object) -> None:
        if isinstance(node, promql.VectorSelector):
            found.append((node.name, [m.name for m in node.matchers.matchers]))

    promql.walk(promql.parse(expr), visit)
    return found


def problems(expr: str, names: dict[str, set[str]]) -> list[str]:
    out = []
    for metric, labels in selectors(expr):
        if metric not in names:
            out.append(f"{metric}: not exported by core.telemetry")
            continue
        out += [f"{metric}: no label {label!r}" for label in labels if label not in names[metric]]
    if not selectors(expr):
        out.append("no metric selector")
    return out


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(doc: dict) -> list[dict]:
    flat = []
    for p in doc["panels"]:
        flat.append(p)
        flat.extend(p.get("panels", []))
    return flat


def panel_metrics(panel: dict, variables: list[str]) -> set[str]:
    return {m for t in panel.get("targets", []) for m, _ in selectors(substitute(t["expr"], variables))}


def test_dashboard_has_what_grafana_needs() -> None:
    doc = dashboard()
    for key in ("uid", "title", "panels", "schemaVersion", "templating", "time"):
        assert key in doc, key
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", doc["uid"])
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    uid = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]["uid"]
    for p in panels(doc):
        assert p["type"] and p["title"]
        assert set(p["gridPos"]) >= {"h", "w", "x", "y"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == uid
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["expr"] and t["datasource"]["uid"] == uid


def test_every_query_parses_and_names_exported_metrics() -> None:
    doc = dashboard()
    names = exported()
    variables = [v["name"] for v in doc["templating"]["list"]]
    exprs = [t["expr"] for p in panels(doc) for t in p.get("targets", [])]
    assert len(exprs) >= 20
    for expr in exprs:
        assert problems(substitute(expr, variables), names) == [], expr
    for var in doc["templating"]["list"]:
        m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", var["query"]["query"])
        assert m, var
        assert m[1] in names and m[2] in names[m[1]], var


def test_dashboard_shows_privacy_utility_and_every_system_metric() -> None:
    doc = dashboard()
    variables = [v["name"] for v in doc["templating"]["list"]]
    used = {m for p in panels(doc) for m in panel_metrics(p, variables)}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    catalogue = {re.sub(r"_total$", "", n) for n in telemetry.metric_names()}
    assert catalogue <= families, f"not on the dashboard: {sorted(catalogue - families)}"
    # privacy against utility in one panel, split per attack and defense
    both = [p for p in panels(doc) if {"leakbed_attack_ap", "leakbed_utility"} <= panel_metrics(p, variables)]
    assert both and all("attack" in t["legendFormat"] or "defense" in t["legendFormat"] for t in both[0]["targets"])
    assert {"attack", "defense", "prior", "world"} <= set(variables)


def test_the_check_catches_unknown_metrics_labels_and_bad_syntax() -> None:
    names = exported()
    assert problems("rate(leakbed_updates_received_total[1m])", names) == []
    assert problems("leakbed_no_such_metric", names) == ["leakbed_no_such_metric: not exported by core.telemetry"]
    assert problems('leakbed_attack_ap{user_id="u1"}', names) == ["leakbed_attack_ap: no label 'user_id'"]
    assert problems("leakbed_updates_received", names)  # a counter is queried as *_total
    with pytest.raises(ValueError):
        selectors("rate(leakbed_updates_received_total[1m]")


def test_provisioning_points_at_the_compose_services() -> None:
    source = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load(PROVIDERS.read_text())["providers"][0]
    base = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in base["grafana"]["volumes"] if v.startswith("./")}
    assert mounts[provider["options"]["path"]] == "./grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    assert any(p.endswith(":9090") for p in base["prometheus"]["ports"])
