"""Seed 004's reconstruction attacks on a real run (Ray simulation, ServerApp, ClientApp, attack pool,
referee): ``leakbed feature-inference`` is ``leakbed run`` with them as its suite; each is scored
against the sealed per-sample truth, shown in the report and exported to Prometheus."""

import json
from contextlib import nullcontext

import pytest

from leakbed.cli import main
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_one_sample_fedsgd_updates_are_read_exactly_in_a_real_run(tmp_path, monkeypatch, _shared_simulation):
    """The command in this process, its run submitted to the session's simulation SuperLink and Ray head
    (``SharedSimulation``) instead of a link of its own: what is read here is the run, not the link's start and stop,
    which tests/plugins/test_example_plugin.py's CLI process covers. DLG and IG small (1 and 10 steps, f_p one epoch): only
    that they run, are scored and reported is asserted of them (tests/attacks/test_reconstruction.py checks their
    figures)."""
    monkeypatch.setattr("leakbed.simulate.simulation_link", lambda cfg, logs: nullcontext(_shared_simulation.link))
    out = tmp_path / "run"
    sets = [
        "data.synthetic.users=6",
        "data.synthetic.examples_per_user=48",
        "data.synthetic.image_size=8",
        "fl.batch_size=1",
        "fl.local_steps=1",
        *[f"attack.params.{n}.updates=2" for n in ("feature-inference", "dlg", "inverting-gradients")],
        "attack.params.feature-inference.classifier_epochs=20",
        # DLG and IG: their pixel classifier f_p one epoch (20 cost ~5 CPU-s each), 1 and 10 steps
        *[f"attack.params.{n}.classifier_epochs=1" for n in ("dlg", "inverting-gradients")],
        "attack.params.dlg.steps=1",
        "attack.params.inverting-gradients.steps=10",
    ]
    code = main(["feature-inference", str(REPO / "leakbed/configs/reconstruction.toml"), *[a for s in sets for a in ("--set", s)],
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    suite = json.loads((out / "random" / "metrics.json").read_text())["suite"]
    assert sorted(suite) == ["dlg", "feature-inference", "inverting-gradients"]
    fi = suite["feature-inference"]
    assert fi["updates"] == 2 and fi["samples_mean"] == 1 and fi["local_steps"] == 1 and fi["records_missing"] == 0
    assert fi["reconstruction_error"] < 1e-6 and fi["accuracy"] == 1.0, fi  # one sample, one step: exact
    assert fi["seed_table_1"] == 95.35
    assert suite["dlg"]["updates"] == 2 and suite["inverting-gradients"]["updates"] == 2, suite
    report = (out / "report.md").read_text()
    assert "#### inverting-gradients (random prior)" in report and "count-based (no matching)" in report
    prom = (out / "random" / "metrics.prom").read_text()
    assert 'leakbed_attack_sample_accuracy{attack="feature-inference"' in prom
    assert 'leakbed_attack_count_accuracy{attack="dlg"' in prom
