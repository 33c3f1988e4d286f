import numpy as np
import pytest

from attacks import suite
from core.store import UpdateStore


def test_unknown_suite_attack_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown attack 'nope'"):
        suite.spec("nope")


def test_registering_twice_is_refused(monkeypatch):
    monkeypatch.setattr(suite, "REGISTRY", {})
    spec = suite.AttackSpec("x", fit=lambda store, knowledge: None)
    suite.register(spec)
    with pytest.raises(ValueError, match="twice"):
        suite.register(spec)


def test_full_updates_round_trip_by_update_id(tmp_path):
    store = UpdateStore(tmp_path)
    a = {"fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "fc.bias": np.ones(2, np.float32)}
    b = {"fc.weight": -np.ones((2, 3), np.float32), "fc.bias": np.zeros(2, np.float32)}
    store.write_anon_full(3, "b1", ["id-a", "id-b"], [a, b])
    store.write_anon_full(4, "b1", ["id-c"], [b])
    got = store.read_anon_full(3)
    assert sorted(got) == ["id-a", "id-b"]
    assert np.array_equal(got["id-a"]["fc.weight"], a["fc.weight"])
    assert np.array_equal(got["id-b"]["fc.bias"], b["fc.bias"])
