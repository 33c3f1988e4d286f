import subprocess
import sys

import pytest

from leakbed.core.config import ConfigError
from leakbed.sweep import BASELINE, Grid, defense_label, extends, grid_points, parse_grid, read_sweep_file, sweep_spec
from tests.conftest import REPO


def test_grid_is_a_product_plus_an_undefended_baseline():
    axes = parse_grid(["defenses.0.alpha=0, 0.5,2", "defenses.0.name='mm-aug','rand-aug'"])
    points = grid_points({"defenses": [{"name": "bkg-repl"}]}, [], axes)
    assert len(points) == 1 + 3 * 2 and points[BASELINE].defenses == []
    assert {(c.defenses[0].name, c.defenses[0].params["alpha"]) for n, c in points.items() if n != BASELINE} == {
        (n, s) for n in ("mm-aug", "rand-aug") for s in (0, 0.5, 2)
    }


def test_bad_grid_fails_before_running():
    from leakbed.preflight import resolve

    with pytest.raises(ConfigError):
        parse_grid(["defenses.0.variance"])
    with pytest.raises(ConfigError, match="defenses.0.fraction"):
        grid_points({"defenses": [{"name": "noise"}]}, [], parse_grid(["defenses.0.fraction=-1"]))
    points = grid_points({"defenses": [{"name": "noise"}]}, [], parse_grid(["defenses.0.variance=-1"]))
    with pytest.raises(ConfigError, match=r"defenses.0 \(noise\).variance: Input should be greater than or equal to 0"):
        resolve(points["defenses.0.variance=-1"])  # each defense's own parameters: checked by its plugin, before a run


def test_several_labelled_grids_share_one_baseline_and_sweep():
    grids = [
        Grid([("defenses.0.alpha", [0.5, 1.0])], "mm-aug", ['defenses=[{name="mm-aug"}]']),
        Grid([("shuffler.batch_min", [4, 8])], "batching"),
    ]
    points = grid_points({}, ["fl.rounds=3"], None, grids)
    assert list(points) == [
        BASELINE,
        "mm-aug.alpha=0.5",
        "mm-aug.alpha=1.0",
        "batching.batch_min=4",
        "batching.batch_min=8",
    ]
    assert points[BASELINE].defenses == [] and points[BASELINE].shuffler.batch_min == 0
    assert points["mm-aug.alpha=1.0"].defenses[0].name == "mm-aug" and points["batching.batch_min=8"].shuffler.batch_min == 8
    assert all(c.fl.rounds == 3 for c in points.values())
    assert [defense_label(c) for c in points.values()] == ["none", "mm-aug", "mm-aug", "batching", "batching"]
    with pytest.raises(ConfigError, match="both named"):
        grid_points({}, [], None, [grids[1], grids[1]])
    with pytest.raises(ConfigError, match="batching: shuffler.batch_min"):
        grid_points({}, [], None, [Grid([("shuffler.batch_min", [-1])], "batching")])


def test_the_shipped_sweep_files_hold_the_seeds_grids():
    base, sets, grids = read_sweep_file(REPO / "leakbed/configs/sweep-synthetic.toml")
    points = grid_points(base, sets, None, grids)
    labels = {g.label: [v for _, vs in g.axes for v in vs] for g in grids}
    assert labels["bkg-repl"] == [0.25, 0.5, 0.75, 1.0] and labels["noise"] == [1e-2, 1e-1, 1.0, 1e1, 1e2]
    assert labels["rand-aug"] == labels["mm-aug"] == [0.5, 1.0, 2.0] and 0.0 in labels["dp-fedavg"]
    assert {"selective", "local-dp", "dropout", "batching"} <= set(labels)
    assert len(points) == 1 + sum(len(v) for v in labels.values())
    assert points[BASELINE].data.synthetic.users == 24 and points[BASELINE].split.priors == ["random"]
    fem_base, fem_sets, fem_grids = read_sweep_file(REPO / "leakbed/configs/sweep-femnist.toml")
    assert fem_base["data"]["source"] == "leaf" and len(grid_points(fem_base, fem_sets, None, fem_grids)) > 10


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sweep]\nconfig = ''\n", "no \\[\\[sweep.grid\\]\\]"),
        ("[sweep]\nfoo = 1\n", "unknown sweep key 'foo'"),
        ("[sweep]\n[[sweep.grid]]\nlabel = 'a b'\naxes = {x = [1]}\n", "label"),
        ("[sweep]\n[[sweep.grid]]\nlabel = 'a'\naxes = {}\n", "axes"),
        ("[sweep]\n[fl]\nrounds = 2\n", "one \\[sweep\\] table"),
    ],
)
def test_bad_sweep_files_fail_with_one_line(tmp_path, text, message):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_sweep_file(path)


@pytest.mark.long
def test_sweep_cli_needs_a_grid_and_fails_fast(tmp_path):
    run = [sys.executable, "-m", "leakbed.cli", "sweep", "--out", str(tmp_path / "o")]
    none = subprocess.run(run, capture_output=True, text=True)
    assert none.returncode == 2 and "give --grid" in none.stderr
    bad = tmp_path / "s.toml"
    bad.write_text(
        "[sweep]\n[[sweep.grid]]\nlabel = 'x'\naxes = {'defenses.0.p' = [1]}\nset = ['defenses=[{name=\"dropout\"}]']\n"
    )
    out = subprocess.run([*run[:4], str(bad), *run[4:]], capture_output=True, text=True)
    assert out.returncode == 2 and "defenses.0 (dropout).p: Input should be less than 1" in out.stderr
    assert not (tmp_path / "o").exists()


def test_a_sweep_folder_may_be_extended_but_never_mixed():
    grid = Grid([("defenses.0.variance", [0.5])], "noise", ['defenses=[{name="noise"}]'])
    more = Grid([("shuffler.batch_min", [4])], "batching")
    old = sweep_spec(grid_points({}, [], None, [grid]))
    assert extends(old, sweep_spec(grid_points({}, [], None, [grid, more])))  # a new grid: finished points reused
    assert not extends(old, sweep_spec(grid_points({}, ["fl.rounds=3"], None, [grid])))  # same names, other configs
    assert not extends(old, sweep_spec(grid_points({}, [], None, [more])))  # a finished point left out
    assert not extends(["baseline"], old)  # not a sweep spec
