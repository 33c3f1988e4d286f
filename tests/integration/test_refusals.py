"""One preflight for every entry point: a config the run cannot serve gets the same one-line refusal from
``leakbed run``, ``leakbed deploy-local`` and ``flwr run`` (the ServerApp's main runs the preflight first), before
anything starts or is written."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from leakbed.cli import main
from tests.conftest import SharedSimulation

TINY = ["data.synthetic.users=4", "data.synthetic.examples_per_user=40", "fl.rounds=1", 'split.priors=["random"]']
CASES = [
    ('defenses=[{name="vocab", tokens=100}]', "defenses.0: vocab needs token data (text); corpus synthetic has none"),
    ('attack.suite=["knn", "nope"]', "attack.suite: unknown attack 'nope' (known: "),
    ('attack.suite=["knn", "knm"]', "attack.suite: unknown attack 'knm'; did you mean 'knn'?"),
    ("attack.params.knn.k=0", "attack.params.knn.k: 0 is less than the minimum of 1"),
    ("attack.params.knn.kk=3", "attack.params.knn.kk: unknown parameter of 'knn'; did you mean 'k'?"),
    ('fl.secure_aggregation="secagg+"', "attack.suite: 'mlp' needs individual updates, but fl.secure_aggregation = 'secagg+'"),
    ('defenses=[{name="noise", strength=1}]', "defenses.0 (noise).strength: Extra inputs are not permitted"),
    (
        'defenses=[{name="noise", varianc=1}]',
        "defenses.0 (noise).varianc: Extra inputs are not permitted; did you mean 'variance'? (valid: variance)",
    ),
    ('defenses=[{name="nosie"}]', "defenses.0: unknown defense 'nosie'; did you mean 'noise'?"),
    ("fl.rouns=1", "fl.rouns: Extra inputs are not permitted; did you mean 'rounds'?"),
    ('attack.suite=["membership"]', "attack.suite: 'membership' needs text data; data.source 'synthetic' (synthetic) is image"),
    ('data.source="leaf" data.path="/no/such/folder"', "/no/such/folder"),
]

# ``flwr run`` reaches the same preflight as the CLI: the ServerApp's main refuses every case above in-process
# (``test_the_serverapps_main_refuses_every_case_in_one_line_before_writing``: the same ``checked`` call, the same
# ``Refused``, the same log filter, whatever the case), and one real run, the case with the richest line (quotes,
# parentheses, a did-you-mean), shows that line, and nothing else, coming back through Flower's Simulation Runtime and
# ``flwr run --stream``. Measured: four such runs took 63 s in a full-suite run; this one 18 s here on a loaded machine
FLWR_CASE = CASES[7]


def _sets(case: str) -> list[str]:
    from leakbed.core.config import split_overrides

    return [*TINY, *split_overrides(case)]


@pytest.mark.parametrize(("case", "message"), CASES)
@pytest.mark.parametrize("command", ["run", "deploy-local"])
def test_the_cli_refuses_in_one_line_before_anything_starts(tmp_path, capsys, command, case, message):
    out = tmp_path / "out"
    code = main([command, *[a for s in _sets(case) for a in ("--set", s)], "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("leakbed: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert not out.exists()


def test_the_serverapps_main_refuses_every_case_in_one_line_before_writing(tmp_path: Path) -> None:
    """Below the process: the ServerApp's main (what ``flwr run`` runs) with each case's run config raises ``Refused``
    with the CLI's message before the out-dir exists, and Flower's two ways of logging a failed ServerApp (the
    Simulation Runtime's ``exc_info`` record, ``run_simulation``'s message and its formatted traceback) come out as that
    one line, once: the path the end-to-end case below takes, for every case."""
    import traceback

    from flwr.app import Context, RecordDict

    from leakbed import apps

    flower = logging.getLogger("flwr")
    for n, (case, message) in enumerate(CASES):
        out = tmp_path / f"out-{n}"
        config = {"set": " ".join(_sets(case)), "out-dir": str(out)}
        context = Context(run_id=n, node_id=0, node_config={}, state=RecordDict(), run_config=config)
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        flower.addHandler(handler)
        try:
            try:
                apps.main(None, context)  # type: ignore[arg-type]  # refused before the grid is used
            except apps.Refused as err:
                refused = err
                flower.error("%s raised an exception", "Simulation", exc_info=err)
                flower.error("An exception occurred !! %s", err)
                flower.error(traceback.format_exc())
            else:
                raise AssertionError(f"{case}: not refused")
        finally:
            flower.removeHandler(handler)
        assert message in str(refused) and "\n" not in str(refused), refused
        lines = [logging.Formatter().format(r) for r in records]
        assert lines == [f"leakbed: error: {refused}"], lines
        assert not out.exists()


@pytest.mark.slow
def test_flwr_run_refuses_in_the_same_line_and_writes_nothing(tmp_path: Path, _shared_simulation: SharedSimulation):
    """``flwr run`` against a simulation SuperLink (the session's, joined to its Ray head: a run skips Ray's own start
    and stop): the run's log holds the refusal as one line (no traceback), the run ends, and its out-dir is never
    created."""
    link = _shared_simulation.link
    assert link is not None  # started for every slow test (tests/conftest.py)
    case, message = FLWR_CASE
    out, log = tmp_path / "out", tmp_path / "flwr.log"
    federation = {"num-supernodes": 4, "client-resources-num-cpus": 1}  # the session head has one CPU
    link.submit({"set": " ".join(_sets(case)), "out-dir": str(out)}, federation, log)
    lines = log.read_text(errors="replace").splitlines()
    refusals = [line for line in lines if "leakbed: error: " in line]
    assert len(refusals) == 1 and message in refusals[0], lines[-20:]
    assert not any(line.startswith("Traceback") for line in lines), lines
    assert not out.exists()
