"""What a kind's scorer gets: read-only params, the given ids, checked outputs; and how one attack is dispatched."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from leakbed.core.declaration import Scoring
from leakbed.referee.context import ParamsView
from leakbed.referee.schemas import OutputsError
from leakbed.referee.scorers import ScorerError, score_one
from tests.referee.kit import Update, context, declaration, file_outputs, write_run

PARAMS = {"eval_pairs": 100, "siamese": {"eval_pairs": 10_000, "lr": 0.001}, "columns": ["a", {"b": 1}]}


def test_params_view_reads_like_the_params_model_did():
    p = ParamsView(PARAMS)
    assert p.eval_pairs == 100 and p.siamese.eval_pairs == 10_000 and p["siamese"]["lr"] == 0.001
    assert p.columns[0] == "a" and p.columns[1].b == 1 and isinstance(p.columns, tuple)
    assert dict(p.siamese) == {"eval_pairs": 10_000, "lr": 0.001} and len(p) == 3 and "siamese" in p
    assert p.to_dict() == PARAMS and p.to_dict() is not p.to_dict()
    with pytest.raises(AttributeError, match=r"params have no 'epochs' \(have: columns, eval_pairs, siamese\)"):
        _ = p.epochs


def test_params_view_is_read_only_all_the_way_down():
    p = ParamsView(PARAMS)
    for target, key in ((p, "eval_pairs"), (p.siamese, "lr"), (p, "new")):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(target, key, 1)
        with pytest.raises(AttributeError, match="read-only"):
            delattr(target, key)
    with pytest.raises(TypeError):
        p["eval_pairs"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        p.columns[0] = "z"  # type: ignore[index]
    source = {"siamese": {"lr": 0.001}}
    view = ParamsView(source)
    source["siamese"]["lr"] = 1.0  # the caller's dict changing later does not reach the view
    assert view.siamese.lr == 0.001
    assert pickle.loads(pickle.dumps(p)) == p and copy.deepcopy(p).siamese.lr == 0.001


def test_a_context_wraps_a_plain_dict_and_falls_back_to_the_store_for_given_ids(tmp_path):
    layout = write_run(tmp_path, [Update("a1", "u1", 1), Update("a2", "u2", 2)])
    ctx = context(layout, "mlp", "reid", params={"siamese": {"eval_pairs": 3}})
    assert isinstance(ctx.params, ParamsView) and ctx.params.siamese.eval_pairs == 3
    assert list(ctx.given) == ["a1", "a2"]  # no given.npy: every update of the store
    file_outputs(layout, "knn", {"ids": np.asarray(["a2"]), "classes": np.asarray(["u1"]), "scores": np.ones((1, 1))}, ["a2"])
    assert list(context(layout, "knn", "reid").given) == ["a2"]


def test_outputs_are_checked_against_the_declared_kind(tmp_path):
    layout = write_run(tmp_path, [Update("a1", "u1")])
    file_outputs(layout, "x", {"ids": np.asarray(["a1"]), "scores": np.ones(1)})
    with pytest.raises(OutputsError, match="^outputs: 'classes' must be str \\(k,\\); it is missing$"):
        _ = context(layout, "x", "reid").outputs
    with pytest.raises(OutputsError, match="'target_class'"):
        _ = context(layout, "x", "profile").outputs
    assert set(context(layout, "x", "plugin").outputs) == {"ids", "scores"}  # a plugin's are the sandbox's to check
    np.save(layout.outputs("random") / "o.npz", np.asarray([object()], dtype=object), allow_pickle=True)
    (layout.outputs("random") / "o.npz.npy").rename(layout.outputs("random") / "o.npz")
    with pytest.raises(OutputsError, match="without pickle"):
        _ = context(layout, "o", "reid").outputs


def test_score_one_appends_the_declared_notes_and_reference(tmp_path):
    layout = write_run(tmp_path, [Update("a1", "u1"), Update("a2", "u2")])
    file_outputs(layout, "mlp", {"ids": np.asarray(["a1", "a2"]), "classes": np.asarray(["u1", "u2"]), "scores": np.eye(2)})
    decl = declaration("mlp", Scoring(kind="reid", notes=("Seed 001 Table 3: 80 AP.",), reference={"ap": 0.8}))
    m = score_one(decl, context(layout, "mlp", "reid"))
    assert m["ap"] == 1.0 and m["notes"][-1] == "Seed 001 Table 3: 80 AP." and m["reference"] == {"ap": 0.8}
    assert "scored_by" not in m and len(m["notes"]) == 2  # the coverage line, then the declared one
    with pytest.raises(ScorerError, match="unknown scorer kind 'nope'"):
        score_one(declaration("mlp", Scoring(kind="nope")), context(layout, "mlp", "reid"))


def test_a_plugin_scorer_gets_its_declared_truth_fields_for_the_given_updates(tmp_path, monkeypatch):
    import leakbed.workers.scoring

    layout = write_run(tmp_path, [Update("a1", "u1", 1, {"colour": "red"}), Update("a2", "u2", 2), Update("a3", "u3", 3)])
    file_outputs(layout, "mine", {"guess": np.asarray(["u1", "u9"])}, ["a2", "a1", "zz"])
    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        return {"accuracy": 0.5, "notes": ["its own line"]}

    monkeypatch.setattr(leakbed.workers.scoring, "score_plugin", fake)
    scoring = Scoring(kind="plugin", function="mine.scoring:score", truth=("user_id", "round", "colour"), notes=("ours",))
    decl = declaration("mine", scoring)
    ctx = context(layout, "mine", "plugin", params={"top": {"k": 2}})
    m = score_one(decl, ctx)
    assert m == {"accuracy": 0.5, "notes": ["its own line", "ours"], "scored_by": "plugin"}
    assert seen["decl"] is decl and seen["outputs"] == layout.outputs("random") / "mine.npz"
    assert list(seen["given"]) == ["a2", "a1", "zz"] and seen["params"] == {"top": {"k": 2}}
    assert seen["truth"] == {"user_id": ["u2", "u1", None], "round": [2, 1, None], "colour": [None, "red", None]}
