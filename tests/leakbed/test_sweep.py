import json
import subprocess
import sys

import pytest

from leakbed.config import ConfigError
from leakbed.sweep import BASELINE, grid_points, parse_grid

TINY = ["data.synthetic.users=8", "data.synthetic.examples_per_user=40", "data.synthetic.image_size=8", "fl.rounds=3",
        "fl.fraction_train=0.5", "attack.workers=1", 'split.priors=["random"]']


def test_grid_is_a_product_plus_an_undefended_baseline():
    axes = parse_grid(["defenses.0.strength=0, 0.5,2", "defenses.0.name='mm-aug','rand-aug'"])
    points = grid_points({"defenses": [{"name": "bkg-repl"}]}, [], axes)
    assert len(points) == 1 + 3 * 2 and points[BASELINE].defenses == []
    assert {(c.defenses[0].name, c.defenses[0].strength) for n, c in points.items() if n != BASELINE} == {
        (n, s) for n in ("mm-aug", "rand-aug") for s in (0, 0.5, 2)
    }


def test_bad_grid_fails_before_running():
    with pytest.raises(ConfigError):
        parse_grid(["defenses.0.strength"])
    with pytest.raises(ConfigError, match="defenses.0.strength"):
        grid_points({"defenses": [{"name": "noise"}]}, [], parse_grid(["defenses.0.strength=-1"]))


@pytest.mark.slow
def test_sweep_runs_resumes_and_reports(tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "leakbed.cli", "sweep", "--set", 'defenses=[{name="rand-aug"}]',
           "--grid", "defenses.0.strength=0,1", "--out", str(out)] + [a for s in TINY for a in ("--set", s)]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "ran 3 of 3 points" in first.stdout
    rows = json.loads((out / "tradeoff.json").read_text())
    assert [r["point"] for r in rows] == [BASELINE, "defenses.0.strength=0", "defenses.0.strength=1"]
    assert rows[0]["utility_norm"] == 1.0 and (out / "tradeoff.png").stat().st_size > 10_000
    # strength 0 is the baseline, exactly
    assert rows[1]["utility"] == rows[0]["utility"] and rows[1]["mlp_x_chance"] == rows[0]["mlp_x_chance"]
    stamp = (out / "defenses.0.strength=1" / "metrics.json").stat().st_mtime_ns
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0 and "ran 0 of 3 points (3 reused)" in again.stdout
    assert (out / "defenses.0.strength=1" / "metrics.json").stat().st_mtime_ns == stamp
    other = subprocess.run([*cmd[:-2], "--grid", "fl.lr=0.2", "--out", str(out)], capture_output=True, text=True)
    assert other.returncode == 2 and "different sweep" in other.stderr
