import numpy as np

from leakbed.core.store import UpdateStore


def test_round_trip_and_streaming_layout(tmp_path):
    s = UpdateStore(tmp_path)
    s.write_global(1, {"fc.weight": np.ones((2, 2))})
    s.write_shadow(1, ["a", "b"], np.eye(2, dtype=np.float32))
    s.write_shadow(2, ["a", "b"], np.eye(2, dtype=np.float32))
    s.write_anon(1, "x", ["id1"], np.ones((1, 2), np.float32), np.array([5]))
    s.write_anon(2, "y", ["id2", "id3"], np.zeros((2, 2), np.float32), np.array([3, 4]))
    assert s.read_global(1)["fc.weight"].shape == (2, 2)
    x, y, r = s.read_shadow()
    assert x.shape == (4, 2) and list(y) == ["a", "b", "a", "b"] and list(r) == [1, 1, 2, 2]
    anon = s.read_anon()
    assert list(anon["ids"]) == ["id1", "id2", "id3"] and list(anon["round"]) == [1, 2, 2]
    assert s.shadow_rounds() == [1, 2]
    assert not list(tmp_path.rglob("*.tmp.npz")), "writes are atomic"


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
