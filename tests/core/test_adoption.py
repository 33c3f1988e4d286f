import pytest

from leakbed.core.adoption import adopters, defending_users, defenses_of
from leakbed.core.config import DefenseConfig
from tests.conftest import tiny_config

USERS = [f"user{i}" for i in range(10)]


def test_fraction_is_a_seeded_draw():
    d = DefenseConfig(name="noise", fraction=0.3)
    a = adopters(d, 0, USERS, seed=1)
    assert len(a) == 3 and a == adopters(d, 0, USERS, seed=1) and a <= set(USERS)
    assert any(adopters(d, 0, USERS, seed=s) != a for s in range(2, 6))


def test_named_users_override_fraction_and_must_exist():
    assert adopters(DefenseConfig(name="noise", fraction=0.1, users=["user3", "user7"]), 0, USERS, 0) == {"user3", "user7"}
    with pytest.raises(ValueError, match="not users"):
        adopters(DefenseConfig(name="noise", users=["mallory"]), 2, USERS, 0)


def test_each_user_gets_its_defenses_in_order():
    cfg = tiny_config(
        'defenses=[{name="mm-aug", alpha=1.0, users=["user1"]}, {name="noise", variance=0.1, users=["user1", "user2"]}]'
    )
    ids = [f"user{i}" for i in range(6)]
    assert [(i, d.name) for i, d in defenses_of(cfg, ids, "user1")] == [(0, "mm-aug"), (1, "noise")]
    assert [d.name for _, d in defenses_of(cfg, ids, "user2")] == ["noise"]
    assert defending_users(cfg, ids) == {"user1", "user2"}
