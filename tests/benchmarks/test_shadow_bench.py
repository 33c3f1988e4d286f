"""The shadow benchmark runs on the current attacker knowledge (it once broke silently when its fields changed) and
its two paths agree on the CPU."""

from __future__ import annotations

import json

import pytest

from benchmarks import shadow


@pytest.mark.long
def test_the_loop_and_the_batched_paths_agree_on_one_round(capsys):
    code = shadow.main(["--only", "cnn", "--repeats", "1", "--threads", "1"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    run = summary["cnn"]["threads1"]
    assert code == 0 and summary["ok"] and summary["device"] == "cpu", summary
    assert run["labels_equal"] and run["max_abs_diff"] <= shadow.TOLERANCE, run
    assert summary["cnn"]["users"] == 60 and summary["cnn"]["local_steps"] > 0
