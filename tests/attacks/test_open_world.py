import numpy as np
import pytest

from leakbed.attacks import open_world
from leakbed.core.config import AttackConfig
from tests.attacks.reid_store import fit, make, score


def _attack(seen: float) -> AttackConfig:
    siamese = {"epochs": 10, "pairs": 2000, "eval_pairs": 4000}
    params = {"mlp_epochs": 60, "seen_fraction": seen, "siamese": siamese}
    return AttackConfig(suite=["open-world"], params={"open-world": params})


def test_split_is_disjoint_deterministic_and_nested_over_seen_shares():
    ids = [f"u{k}" for k in range(30)]
    a = open_world.split_users(ids, 3, 0.5, 1 / 3)
    assert a == open_world.split_users(ids, 3, 0.5, 1 / 3)
    assert len(a["holdout"]) == 10 and len(a["seen"]) == 10 and len(a["unseen"]) == 10
    assert sorted(a["holdout"] + a["seen"] + a["unseen"]) == sorted(ids)
    more = open_world.split_users(ids, 3, 0.8, 1 / 3)
    assert more["holdout"] == a["holdout"] and set(a["seen"]) < set(more["seen"])
    assert open_world.split_users(ids, 4, 0.5, 1 / 3) != a


def test_unseen_users_prior_is_never_read(tmp_path):
    fx = make(tmp_path, _attack(0.5))
    split = open_world.split_users(fx.users, 0, 0.5, 1 / 3)
    r = fit(fx, "open-world")
    assert set(r["classes"]) == set(split["seen"]) | {open_world.UNSEEN}
    assert not set(r["classes"]) & set(split["unseen"]) and list(r["holdout"]) == split["holdout"]


@pytest.mark.parametrize("shuffle", [False, True])
def test_open_world_well_above_chance_and_chance_on_shuffled_owners(tmp_path, shuffle):
    attack = _attack(0.5)
    fx = make(tmp_path, attack, users=24, shuffle=shuffle)
    fit(fx, "open-world")
    m = score(fx, "open-world", tmp_path)
    if shuffle:
        assert m["x_chance"] < 1.6 and 0.35 < m["match_ap"] < 0.65, m
    else:
        assert m["x_chance"] > 2.5 and m["match_ap"] > 0.75 and m["unseen_recall"] > 0.5, m


def test_no_seen_user_still_matches(tmp_path):
    attack = _attack(0.0)
    fx = make(tmp_path, attack, users=30)
    fit(fx, "open-world")
    m = score(fx, "open-world", tmp_path)
    assert m["seen_users"] == 0 and np.isnan(m["ap"]) and m["match_ap"] > 0.65, m


def test_sweep_input_is_checked_before_anything_starts():
    from leakbed.core.config import ConfigError, build_config
    from leakbed.studies.open_world_sweep import parse_seen, sweep_config

    assert parse_seen("1,0,0.5") == [0.0, 0.5, 1.0]
    for bad in ("", "0.5,x", "1.5", "0.5,0.5"):
        with pytest.raises(ConfigError, match="--seen"):
            parse_seen(bad)
    cfg = sweep_config(build_config({}, ["attack.suite=['matching']"]), "chrono")
    assert cfg.split.priors == ["chrono"] and cfg.attack.suite == ["matching", "open-world"]
    with pytest.raises(ConfigError, match="--prior"):
        sweep_config(cfg, "future")


def test_referee_load_reads_back_sealed_truth(tmp_path):
    from leakbed.referee.seal import Sealer
    from leakbed.referee.truth import Referee

    sealer = Sealer(tmp_path)
    sealer.seal("a", "user1", 3, {"attr-tone": 2.0})
    assert not hasattr(sealer, "truth_for") and not hasattr(Referee, "seal")  # sealing is write-only, reading can't seal
    back = Referee.load(tmp_path)
    assert list(back.truth_for(np.array(["a"]))) == ["user1"] and back.field_for(np.array(["a"]), "attr-tone") == [2.0]
    assert back.records() == [{"update_id": "a", "user_id": "user1", "round": 3, "attr-tone": 2.0}]
