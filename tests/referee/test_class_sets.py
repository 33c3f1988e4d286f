"""Every kind scores over the sets the referee holds, never those the attack names: the users of the attacker's
knowledge, the splits its params define, the attribute columns, the sampled node pseudonyms, a batch's records. What an
attack leaves out counts at chance, what it adds or repeats is ignored, and both are reported."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from leakbed.core.attack_sets import split_users
from leakbed.core.reid_metrics import random_ranking_ap
from leakbed.core.store import UpdateStore
from leakbed.referee.coverage import ClassCoverage
from tests.referee.cases import SEED, USERS, Case, knowledge_file
from tests.referee.cases import cross_modal as cross_modal_case
from tests.referee.cases import linkage as linkage_case
from tests.referee.cases import matching as matching_case
from tests.referee.cases import open_world as open_world_case
from tests.referee.cases import reconstruction as reconstruction_case
from tests.referee.cases import reid as reid_case
from tests.referee.kit import RULE, context

ALL = np.ones(len(USERS), bool)


def owners_of(case: Case) -> np.ndarray:
    truth = {}
    for line in (case.layout.referee(RULE) / "truth.jsonl").read_text().splitlines():
        rec = json.loads(line)
        truth[rec["update_id"]] = rec["user_id"]
    return np.asarray([truth[i] for i in case.given])


def with_outputs(case: Case, out: dict[str, np.ndarray], attack: str = "hostile") -> dict:
    ctx = context(case.layout, attack, case.kind, case.params, case.cfg, attack=attack)
    ctx.__dict__["outputs"] = out
    ctx.__dict__["given"] = np.asarray(case.given, str)
    if case.federation is not None:
        ctx.__dict__["federation"] = case.federation
    from leakbed.referee.kinds import KINDS

    return KINDS[case.kind].score(ctx)


def test_class_coverage_keeps_the_attacks_order_and_counts_what_it_adds_repeats_and_omits():
    held = ClassCoverage(["a", "b", "c", "d"], np.asarray(["c", "x", "a", "c", "x", "y"]))
    assert held.classes.tolist() == ["c", "a", "b", "d"] and held.column.tolist() == [0, 2, -1, -1]
    assert held.report() == {"classes_missing": 2, "classes_extra": 2, "classes_duplicate": 2, "n_classes": 4}
    scores = np.arange(12.0).reshape(2, 6)
    widened = held.widen(held.kept(scores))
    assert widened[:, :2].tolist() == [[0.0, 2.0], [6.0, 8.0]] and np.isnan(widened[:, 2:]).all()
    assert ClassCoverage(["a"], np.asarray(["a"])).notes() == []  # nothing to say about a complete output


def test_re_identification_ranks_every_user_the_referee_holds(tmp_path):
    case = reid_case(tmp_path)
    twin, out, owners = case.score(), case.outputs(), owners_of(case)
    best = int(np.argmax([average_precision_score(owners == u, out["scores"][:, j]) for j, u in enumerate(USERS)]))
    chance = {u: random_ranking_ap(int((owners == u).sum()), len(owners)) for u in USERS}
    one = with_outputs(case, {**out, "classes": USERS[[best]], "scores": out["scores"][:, [best]]})
    ap_best = average_precision_score(owners == USERS[best], out["scores"][:, best])
    assert ap_best > twin["ap"]  # the old scorer averaged over this one user: 75.2 AP became 100.0 in the issue
    assert one["ap"] == pytest.approx((ap_best + sum(chance[u] for u in USERS if u != USERS[best])) / len(USERS))
    assert one["top1"] == pytest.approx(1 / 6) and one["top5"] == pytest.approx(5 / 6) and one["n_users"] == 6
    assert (one["classes_missing"], one["classes_extra"], one["classes_duplicate"]) == (5, 0, 0)
    assert any("scored 1 of the 6 users" in n for n in one["notes"])
    none = with_outputs(case, {**out, "classes": np.asarray([], str), "scores": np.zeros((len(out["ids"]), 0))})
    assert none["ap"] == pytest.approx(twin["chance_ap"]) == none["chance_ap"] and none["x_chance"] == pytest.approx(1.0)
    assert none["top1"] == pytest.approx(1 / 6) and none["classes_missing"] == 6
    dup = with_outputs(case, {**out, "classes": USERS[[best] * 6], "scores": out["scores"][:, [best] * 6]})
    assert dup["ap"] == pytest.approx(one["ap"]) and dup["classes_duplicate"] == 5
    renamed = USERS.astype(object)
    renamed[[j for j in range(6) if j != best]] = [f"stray-{j}" for j in range(5)]
    stray = with_outputs(case, {**out, "classes": renamed.astype(str)})
    assert stray["ap"] == pytest.approx(one["ap"]) and stray["classes_extra"] == 5 and stray["classes_missing"] == 5


def test_a_stray_column_changes_nothing_of_a_complete_ranking(tmp_path):
    case = reid_case(tmp_path)
    twin, out = case.score(), case.outputs()
    loud = np.full((len(out["ids"]), 1), 9.0)  # it would rank first in every row, were it read
    padded = with_outputs(case, {**out, "classes": np.r_[out["classes"], ["ghost"]], "scores": np.c_[out["scores"], loud]})
    keys = ("ap", "top1", "top5", "chance_ap")
    assert {k: padded[k] for k in keys} == {k: twin[k] for k in keys}
    assert padded["classes_extra"] == 1


def test_the_users_are_the_knowledges_not_the_owners_nor_the_attacks(tmp_path):
    case = reid_case(tmp_path)
    out = case.outputs()
    knowledge_file(case.layout, [*USERS[1:], "user-without-updates"])  # user0's updates: an unknown owner's
    m = with_outputs(case, out)
    assert m["n_classes"] == 6 and m["n_users"] == 5  # a user without a given update has no AP to average
    assert m["classes_extra"] == 1 and m["classes_missing"] == 1  # user0 is not held; the sixth known user is missing
    assert m["n_updates"] == len(case.given)


def test_open_world_takes_its_split_from_the_knowledge_not_the_outputs(tmp_path):
    case = open_world_case(tmp_path)
    twin, out = case.score(), case.outputs()
    split = split_users(list(USERS), SEED, 0.5, 1 / 3)
    assert twin["split"] == "referee" and twin["split_mismatch"] == 0 and twin["holdout_users"] == len(split["holdout"])
    # it declares the unseen users holdout: their updates (which it cannot name) would leave the test set
    lying = {**out, "holdout": np.asarray(split["holdout"] + split["unseen"])}
    m = with_outputs(case, lying)
    assert m["test_updates"] == twin["test_updates"] and m["unseen_users"] == twin["unseen_users"] > 0
    assert m["split_mismatch"] == len(split["unseen"]) and m["ap"] == pytest.approx(twin["ap"])


def test_cross_modal_users_and_text_only_users_are_the_referees(tmp_path):
    case = cross_modal_case(tmp_path)
    twin, out = case.score(), case.outputs()
    everyone_paired = with_outputs(case, {**out, "paired": USERS})  # no text-only user left to be scored on
    assert everyone_paired["text_only_ap"] == pytest.approx(twin["text_only_ap"]) and everyone_paired["split"] == "referee"
    keep = np.arange(6) < 2
    few = with_outputs(case, {**out, "users": USERS[keep], "user_emb": out["user_emb"][keep]})
    assert few["classes_missing"] == 4 and few["ap"] < twin["ap"] - 0.1 and few["rank_ap"] < twin["rank_ap"]
    assert few["rank_chance_ap"] == pytest.approx(twin["rank_chance_ap"])


def test_matching_links_every_known_users_updates_to_the_prior(tmp_path):
    case = matching_case(tmp_path)
    twin = case.score()
    one_user = case.score(classes=np.arange(6) == 0)  # shadow rows of one user only
    assert twin["prior_ap"] > 0.9 and one_user["prior_ap"] < twin["prior_ap"] - 0.2


def test_attribute_columns_and_identities_are_the_referees(tmp_path):
    from tests.referee.cases import attributes as attributes_case

    case = attributes_case(tmp_path)
    twin, out = case.score(), case.outputs()
    only_interest = case.score(classes=np.asarray([True, False]))
    ages = only_interest["per_attribute"]["age"]
    assert ages["stl"] == ages["mtl"] == pytest.approx(1 / ages["values"]) and ages["mtl_deanon"] == pytest.approx(1 / 6)
    assert only_interest["stl_attr"] == pytest.approx((1 + 1 / ages["values"]) / 2)
    assert only_interest["stl_attr"] < twin["stl_attr"]
    assert only_interest["classes_missing"] == 1 and only_interest["attr_chance"] == twin["attr_chance"]
    guessed = {**out, "stl_id": np.asarray([f"ghost{i}" for i in range(len(out["ids"]))])}  # names never known
    m = with_outputs(case, guessed)
    assert m["deanon_chance"] == twin["deanon_chance"] == pytest.approx(1 / 6) and m["stl_deanon"] == 0.0


def test_linkage_ranks_the_sampled_pseudonyms_and_the_known_users(tmp_path):
    case = linkage_case(tmp_path)
    twin = case.score()
    store = UpdateStore(case.layout.store(RULE))
    nodes = [f"node-{u}" for u in USERS]
    store.write_config(1, {"sampled": ",".join([*nodes, "node-sampled-but-silent"])})  # what the server shared
    half = np.arange(6) < 3
    m = case.score(classes=half)
    assert m["users_classes_missing"] == 3 and m["pseudonyms_classes_missing"] == 4 and m["pseudonyms_n_classes"] == 7
    assert m["one_example"]["alone"]["ap"] < twin["one_example"]["alone"]["ap"]
    assert m["intersection"]["alone"]["ap"] < twin["intersection"]["alone"]["ap"]


def test_reconstruction_scores_each_batchs_records_not_the_attacks_count(tmp_path):
    case = reconstruction_case(tmp_path)
    twin, out = case.score(), case.outputs()
    assert twin["samples_missing"] == twin["samples_extra"] == 0 and twin["recovered"] == 1.0
    one_each = case.score(classes=np.arange(12) % 3 == 0)  # its best sample of each batch
    assert one_each["samples_missing"] == 8 and one_each["recovered"] == pytest.approx(1 / 3)
    assert one_each["label_accuracy"] < 1.0 and one_each["updates"] == twin["updates"]
    # guesses beyond the batch's records are ignored: noise first, the exact images after, still noise
    noise = np.random.default_rng(0).random(out["recon"].shape).astype(np.float32)
    flood = {**out, "counts": out["counts"] * 2, "recon": np.concatenate([noise[:3], out["recon"][:3], noise[3:6],
             out["recon"][3:6], noise[6:9], out["recon"][6:9], noise[9:], out["recon"][9:]]),
             "probs": np.repeat(out["probs"].reshape(4, 3), 2, axis=0).ravel(), "labels": np.tile(out["labels"], 2)}  # fmt: skip
    m = with_outputs(case, flood)
    assert m["samples_extra"] == 12 and m["recovered"] == 0.0
