"""The metrics reference: every Prometheus metric the ServerApp exports, from its registry."""

from __future__ import annotations

from leakbed.core.tables import markdown_table
from leakbed.core.telemetry import SERVER_REGISTRY
from leakbed.reference.fields import split_unit

INTRO = """# Prometheus metrics

Every metric the ServerApp's `/metrics` endpoint exports (the attack workers' counts included: a
sandboxed worker has no network, so the pool counts for it). Labels are bounded sets and never carry a
user, node or update id. Counters are queried with their `_total` suffix, histograms through `_bucket`,
`_sum` and `_count`.

*Generated from `leakbed/core/telemetry.py`'s registry by `leakbed/reference/metrics_page.py`.*

"""


def page() -> str:
    rows = []
    for metric in sorted(SERVER_REGISTRY._collector_to_names, key=lambda m: m._name):  # noqa: SLF001 - no public listing
        text, unit = split_unit(metric._documentation)  # noqa: SLF001
        kind = metric._type  # noqa: SLF001
        name = f"{metric._name}_total" if kind == "counter" else metric._name  # noqa: SLF001
        labels = ", ".join(f"`{label}`" for label in metric._labelnames) or "—"  # noqa: SLF001
        rows.append([f"`{name}`", kind, labels, unit, text])
    return INTRO + markdown_table(["metric", "type", "labels", "unit", "description"], rows) + "\n"
