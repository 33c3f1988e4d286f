import numpy as np
import pytest

from leakbed.attacks import attributes
from leakbed.core.config import AttackConfig
from leakbed.core.data.corpus import UserData
from tests.attacks.reid_store import fit, make, score

ATTACK = AttackConfig(suite=["attributes"], params={"attributes": {"epochs": 40}})


def _user(values: dict[str, list]) -> UserData:
    n = len(next(iter(values.values())))
    return UserData(np.zeros((n, 1)), np.zeros(n, np.int64), np.zeros(n), {k: np.asarray(v) for k, v in values.items()})


def test_columns_are_per_user_attributes_unless_named():
    prior = {"a": _user({"age": [1, 1], "album": [0, 1]}), "b": _user({"age": [2, 2], "album": [1, 1]})}
    assert attributes.attribute_columns(prior, [], 20) == ["age"]
    assert attributes.attribute_columns(prior, ["album"], 20) == ["album"]
    with pytest.raises(ValueError, match="'glasses'"):
        attributes.attribute_columns(prior, ["glasses"], 20)
    assert attributes.majority(np.array([2, 1, 1, 2, 0])) == 1.0


@pytest.mark.parametrize("shuffle", [False, True])
def test_attributes_and_identity_inferred_alone_and_jointly(tmp_path, shuffle):
    fx = make(tmp_path, ATTACK, users=20, shuffle=shuffle)
    fit(fx, "attributes")
    m = score(fx, "attributes", tmp_path)
    (table,) = m["tables"].values()
    assert table["header"][:6] == ["Attribute", "# Attrs", "STL AttrInf", "STL Deanon", "MTL AttrInf", "MTL Deanon"]
    assert [row[0] for row in table["rows"]] == ["interest", "-"]
    if shuffle:
        assert m["stl_attr"] < m["attr_chance"] + 0.15 and m["stl_deanon"] < 3 * m["deanon_chance"], m
    else:
        assert m["stl_attr"] > m["attr_chance"] + 0.3 and m["mtl_attr"] > m["attr_chance"] + 0.3, m
        assert m["stl_deanon"] > 5 * m["deanon_chance"] and m["mtl_deanon"] > 5 * m["deanon_chance"], m
