"""The audit where a user reads it: the report's section and the console's table (every view with its interval, the
canaries per side, the fitted spreads, the bound beside the most it can show, the flag on a broken run only), the
sweep's cells and its figure."""

from __future__ import annotations

import pytest
from flwr.supercore.task_identity import TaskIdentity

from leakbed.audit_report import FLAG, HEADER, audit_caption, audit_rows, audit_section, plot_epsilon, sweep_audit_cells
from leakbed.core.audit import VIEWS
from leakbed.reference.audit_harness import audited_run, config


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    """An honest DP-FedAvg's audit (through the real mechanism), and the same summary as a flagged run would hold it."""
    with pytest.MonkeyPatch.context() as mp:  # the task identity a SuperLink would set (Flower's DP wrapper reads it)
        for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
            mp.setattr(TaskIdentity, name, value)
        honest = audited_run(config('dp-fedavg", clip=0.5, noise_multiplier=1.0', canaries=64, rounds=4)).summary
    leaky = {**honest, "flagged": True, "flag": "leaks more than its DP claims: test"}
    leaky.update({v: {**honest[v], "above_accountant": True, "interval": [90.0, 120.0]} for v in VIEWS})
    return {"random": {"audit": honest}, "chrono": {"audit": leaky}}


def test_the_table_has_every_view_with_its_interval_counts_spreads_and_flag(runs):
    rows = audit_rows(runs)
    assert len(rows) == 6 and all(len(r) == len(HEADER) for r in rows)
    honest = runs["random"]["audit"]
    for row, view in zip(rows[:3], VIEWS, strict=True):
        est = honest[view]
        assert row[:2] == ["random", view] and f"({est['interval'][1]:.2f})" not in row[3]
        assert row[3] == f"{est['epsilon_emp']:.2f} [{est['interval'][0]:.2f}, {est['interval'][1]:.2f}]"
        assert row[4] == f"{est['inserted']} / {est['held_out']}" and row[7] == ""
    assert rows[0][5].endswith(f"({honest['final model']['spread_null']:.3g})") and rows[1][5].endswith("(—)")
    assert rows[0][2] == f"{honest['epsilon_accountant']:.2f} ({honest['epsilon_exact']:.2f})"
    final = honest["final model"]
    assert rows[0][6] == f"{final['epsilon_lower_bound']:.2f} ({final['lower_bound_ceiling']:.2f})"
    assert all(r[7] == FLAG for r in rows[3:])


def test_the_section_leads_with_the_flag_and_says_what_the_numbers_mean(runs):
    section = "\n".join(audit_section(runs))
    assert "**chrono: leaks more than its DP claims: test.**" in section and "random: leaks" not in section
    caption = audit_caption(runs)
    assert "90% interval" in caption and "1/sqrt(d)" in caption and "the most 64 canaries can show" in caption
    assert f"L2 norm {0.5 * 1e4:g}" in caption and FLAG in caption
    assert audit_section({"random": {}}) == []


def test_the_sweep_cells_and_figure(tmp_path, runs):
    est = runs["random"]["audit"]["final model"]
    row = {"epsilon_emp": est["epsilon_emp"], "epsilon_emp_interval": est["interval"], "canaries_in_out": [31, 33],
           "epsilon_lower_bound": 1.5, "lower_bound_ceiling": 2.3, "audit_flagged": True, "noise_multiplier": 1.0,
           "defense": "dp-fedavg", "epsilon": 12.0, "epsilon_exact": 11.0, "utility": 0.8}  # fmt: skip
    cells = sweep_audit_cells(row)
    assert cells[1:] == ["31 / 33", "1.50 (2.30)", FLAG] and cells[0].startswith(f"{est['epsilon_emp']:.2f} [")
    assert sweep_audit_cells({"epsilon_emp": None}) == ["-", "-", "-", ""]
    assert plot_epsilon([row, {**row, "noise_multiplier": 2.0}], tmp_path / "eps.png")
    assert (tmp_path / "eps.png").stat().st_size > 5000
    assert not plot_epsilon([{"epsilon_emp": None}], tmp_path / "none.png")
