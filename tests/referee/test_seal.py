"""Sealing: a fresh truth file per run (never appended to), opaque ids no seed regenerates."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest

from leakbed.referee.seal import KEY_FILE, TRUTH_FILE, Sealer, TruthExists
from leakbed.referee.truth import Referee


def test_a_second_run_into_the_same_folder_is_refused_and_the_old_truth_kept(tmp_path):
    s = Sealer(tmp_path / "ref")
    s.seal("a1", "alice", 1, {"has-property": 1})
    before = (tmp_path / "ref" / TRUTH_FILE).read_text()
    with pytest.raises(TruthExists, match="already holds a run's truth"):
        Sealer(tmp_path / "ref")
    assert (tmp_path / "ref" / TRUTH_FILE).read_text() == before
    assert json.loads(before) == {"update_id": "a1", "user_id": "alice", "round": 1, "has-property": 1}


def test_only_the_owner_can_read_the_referee_folder(tmp_path):
    Sealer(tmp_path / "ref")
    assert stat.S_IMODE((tmp_path / "ref").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "ref" / KEY_FILE).stat().st_mode) == 0o600


def test_ids_are_distinct_opaque_and_differ_between_runs_of_any_seed(tmp_path):
    s1, s2 = Sealer(tmp_path / "r1"), Sealer(tmp_path / "r2")
    ids1 = [s1.new_update_id() for _ in range(200)]
    ids2 = [s2.new_update_id() for _ in range(200)]
    assert len(set(ids1)) == 200 and not set(ids1) & set(ids2)
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids1)
    # the old derivation from small seeds regenerates none of them
    old = {np.random.default_rng([seed, 0x5A]).bytes(8).hex() for seed in range(1000)}
    assert not old & set(ids1)


def test_the_referee_reads_back_what_was_sealed(tmp_path):
    s = Sealer(tmp_path / "ref")
    ids = [s.new_update_id() for _ in range(3)]
    for i, user in zip(ids, ["u1", "u2", "u1"], strict=True):
        s.seal(i, user, 2, {"holders": 1})
    ref = Referee.load(tmp_path / "ref")
    assert list(ref.truth_for(np.asarray(ids))) == ["u1", "u2", "u1"]
    assert ref.field_for(np.asarray(ids), "round") == [2, 2, 2]
    assert [r["user_id"] for r in ref.records()] == ["u1", "u2", "u1"]
