"""The scorer kinds' table and the outputs each expects: a mismatch is the attack's score failing in one line,
naming the array and what was expected, never a traceback into the report."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from leakbed.core.declaration import Scoring
from leakbed.referee.judge import RunJudge
from leakbed.referee.kinds import KINDS, PLUGIN, kind_names
from leakbed.referee.schemas import OUTPUTS, OutputsError, check_outputs, describe
from leakbed.workers.hostile import ArraySpec
from tests.conftest import REPO, room_of
from tests.referee.kit import RULE, Update, context, declaration, file_outputs, write_run

SIZES = {"n": 5, "k": 3, "d": 4, "u": 3, "c": 1, "a": 4, "r": 2, "s": 6, "p": 10, "q": 2, "m": 7}
DTYPES = {"f": np.float64, "i": np.int64, "u": np.uint8, "b": np.bool_, "U": "<U8"}


def valid(schema: dict[str, ArraySpec]) -> dict[str, np.ndarray]:
    """One array per required name (patterns left out), of an allowed dtype and the shape the symbols give."""
    out = {}
    for name, spec in schema.items():
        if spec.optional or "*" in name:
            continue
        shape = tuple(SIZES[d] if isinstance(d, str) else (2 if d is None else d) for d in spec.shape or ())
        out[name] = np.zeros(shape, DTYPES[spec.kinds[0]])
    return out


def test_the_table_holds_leakbeds_kinds_each_with_its_outputs():
    assert list(KINDS) == [
        "reid", "matching", "cross-modal", "open-world", "profile", "attributes", "property", "aggregate-property",
        "membership", "reconstruction", "linkage", "metadata", "redteam",
    ]  # fmt: skip
    assert kind_names()[-1] == PLUGIN and PLUGIN not in KINDS
    for name, kind in KINDS.items():
        assert kind.outputs is OUTPUTS[name] and callable(kind.score)
        assert all(spec.optional for key, spec in kind.outputs.items() if "*" in key)  # a pattern matches zero or more


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_refuses_a_wrong_dtype_and_a_wrong_shape_in_one_line(kind):
    schema = OUTPUTS[kind]
    arrays = valid(schema)
    check_outputs(arrays, schema)  # the generated outputs are what the kind expects
    name = next(n for n, s in schema.items() if not s.optional and "*" not in n)
    spec = schema[name]
    wrong = np.asarray(["x"] * max(1, arrays[name].size)).reshape(arrays[name].shape) if "U" not in spec.kinds else None
    if wrong is None:
        wrong = np.zeros(arrays[name].shape, np.float64)
    with pytest.raises(OutputsError) as err:
        check_outputs({**arrays, name: wrong}, schema)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"outputs: {name!r} must be {describe(spec)}; got {wrong.dtype}")
    with pytest.raises(OutputsError) as err:
        check_outputs({**arrays, name: arrays[name][..., None]}, schema)  # one dim too many
    assert "\n" not in str(err.value) and f"{name!r}" in str(err.value)
    with pytest.raises(OutputsError, match=f"^outputs: {name!r} must be .*; it is missing$"):
        check_outputs({k: v for k, v in arrays.items() if k != name}, schema)


def test_the_message_names_the_array_the_kinds_and_the_symbolic_shape():
    ids = np.asarray([f"u{i}" for i in range(5)])
    with pytest.raises(OutputsError) as err:
        check_outputs({"ids": ids, "classes": np.asarray(["a", "b"]), "scores": np.arange(5)}, OUTPUTS["reid"])
    assert str(err.value) == "outputs: 'scores' must be float (n, k); got int64 (5,)"
    with pytest.raises(OutputsError) as err:  # n is the ids' length wherever it appears
        check_outputs({"ids": ids, "classes": np.asarray(["a", "b"]), "scores": np.zeros((4, 2))}, OUTPUTS["reid"])
    assert str(err.value) == "outputs: 'scores' must be float (n, k) with n = 5 as in 'ids'; got float64 (4, 2) (axis 0)"
    with pytest.raises(OutputsError, match=r"'weights_mlp' must be float \(n, k\)"):  # a pattern's arrays are checked
        check_outputs({**valid(OUTPUTS["metadata"]), "weights_mlp": np.zeros((5, 2))}, OUTPUTS["metadata"])
    with pytest.raises(OutputsError, match="'vocab' must be uint"):
        check_outputs({**valid(OUTPUTS["membership"]), "vocab": np.zeros((5, 2), np.float32)}, OUTPUTS["membership"])


def test_a_run_judge_reports_the_mismatch_as_the_attacks_one_line(tmp_path, caplog):
    layout = write_run(tmp_path, [Update(f"id{i}", f"u{i % 2}") for i in range(5)])
    ids = np.asarray([f"id{i}" for i in range(5)])
    file_outputs(layout, "bad", {"ids": ids, "classes": np.asarray(["u0", "u1"]), "scores": np.arange(5)}, list(ids))
    file_outputs(layout, "good", {"ids": ids, "classes": np.asarray(["u0", "u1"]), "scores": np.eye(2)[[0, 1, 0, 1, 0]]})
    decls = {n: declaration(n, Scoring(kind="reid")) for n in ("bad", "good", "absent")}
    decls["odd"] = declaration("odd", Scoring(kind="no-such-kind"))
    from leakbed.core.config import ExperimentConfig

    judge = RunJudge(ExperimentConfig(), layout, RULE, decls)
    out = judge.score(["bad", "good", "absent", "odd"], None)
    assert out["bad"] == {"scorer_failed": "outputs: 'scores' must be float (n, k); got int64 (5,)"}
    assert out["absent"] == {"scorer_failed": "outputs: nothing filed for 'absent' (no absent.npz)"}
    assert out["odd"]["scorer_failed"].startswith("scorer failed: ScorerError: attack 'odd': unknown scorer kind")
    assert out["good"]["ap"] == 1.0 and out["good"]["coverage"] == 1.0 and out["good"]["n_updates"] == 5
    said = [r for r in caplog.records if r.getMessage().startswith(("scoring bad", "scoring absent"))]
    assert len(said) == 2 and all(r.exc_info is None for r in said)  # the attack's mismatch: one line, no traceback


def test_the_referee_imports_nothing_from_attacks():
    for path in sorted((REPO / "leakbed" / "referee").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not [n for n in names if room_of(n) == "attacks"], f"{path.name}:{node.lineno} imports attacks"


def test_empty_outputs_pass_whatever_their_dtype_and_score_every_given_update_at_random(tmp_path):
    layout = write_run(tmp_path, [Update(f"id{i}", f"u{i % 2}") for i in range(6)])
    empty = {"ids": np.asarray([]), "classes": np.asarray(["u0", "u1"]), "scores": np.zeros((0, 2))}
    check_outputs(empty, OUTPUTS["reid"])  # np.asarray([]) is float: it holds no value to refuse
    file_outputs(layout, "none", empty, [f"id{i}" for i in range(6)])
    m = KINDS["reid"].score(context(layout, "none", "reid"))
    assert m["coverage"] == 0.0 and m["rows_missing"] == 6 and m["n_updates"] == 6 and 0.0 <= m["ap"] <= 1.0
    with pytest.raises(OutputsError, match="'scores' must be float"):
        check_outputs({**empty, "scores": np.zeros((0, 2), dtype=object)}, OUTPUTS["reid"])
