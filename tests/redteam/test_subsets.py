"""The red team against the scores' sets: hostile attacks return their honest twin's scores over classes they chose
(``tests/redteam/hostile/src/leakbed_hostile/subsets.py``: only the most confident user, no class at all, one class
repeated, users renamed to names never given plus invented ones), in one real run beside the twin
(``hostile-honest``), in an environment of this module's own (``tests/redteam/users.py``), as the user who runs
pytest: the route is the referee's arithmetic over bytes the plugin wrote, the same whoever runs it (the routes where
the uid matters are ``test_sandboxes.py``'s and ``test_declarations.py``'s, run both ways).

On the old scorer each beat the twin (AP was averaged over the classes the attack returned: the issue measured 75.2
AP become 100.0 with ``n_users 1``); the same outputs are scored that way here, from the run's files, to show the route
was real. Holds: by the referee, every one scores at most the twin on every headline number, over the same users and
the same chance, and reports what it left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from tests.redteam.handmade import Env
from tests.redteam.users import entry_points, hostile_env, leakbed, out_folder

pytestmark = pytest.mark.redteam
TWIN = "hostile-honest"
SUBSETS = ["hostile-one-user", "hostile-no-classes", "hostile-dup-classes", "hostile-stray-classes"]
USERS = 8
SMALL = [
    "seed=7",
    f"data.synthetic.users={USERS}",
    "data.synthetic.examples_per_user=40",
    "data.synthetic.bias=0.4",  # a twin short of perfect, so that a chosen class set has something to hide
    "data.synthetic.image_size=8",
    "fl.rounds=2",
    "fl.fraction_train=1.0",
    'split.priors=["random"]',
    "workers.count=2",
    "workers.task_deadline=120",
    "simulation.client_cpus=2",  # one ClientApp actor on the suite's 2 cores: the federation's numbers are the same
]


@pytest.fixture(scope="module")
def child() -> Iterator[Env]:
    """An environment of this module's own, readable by everyone, with the twin and its subsets published."""
    with hostile_env("leakbed-redteam-subsets-", entry_points(lambda name: name in (TWIN, *SUBSETS))) as env:
        yield env


def old_ap(owners: np.ndarray, classes: np.ndarray, scores: np.ndarray) -> float:
    """The old scorer's AP: the mean over the columns the attack returned that have a positive (duplicates counted)."""
    aps = [average_precision_score(owners == c, scores[:, j]) for j, c in enumerate(classes) if (owners == c).any()]
    return float(np.mean(aps)) if aps else float("nan")


@pytest.mark.slow
def test_a_chosen_class_set_never_beats_the_honest_twin(child: Env, tmp_path: Path) -> None:
    folder = out_folder(None, tmp_path)
    sets = [*SMALL, f"attack.suite={json.dumps([TWIN, *SUBSETS])}"]
    done = leakbed(child, None, ["run", "--out", str(folder), *(a for s in sets for a in ("--set", s))], tmp_path, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    metrics = json.loads((folder / "random" / "metrics.json").read_text())
    result = {n: metrics["attackers"].get(n) or metrics["suite"][n] for n in [TWIN, *SUBSETS]}
    truth = {}
    for line in (folder / "referee" / "random" / "truth.jsonl").read_text().splitlines():
        rec = json.loads(line)
        truth[rec["update_id"]] = rec["user_id"]
    twin = result[TWIN]
    assert twin["coverage"] == 1.0 and twin["classes_missing"] == twin["classes_extra"] == 0 and twin["n_users"] == USERS, twin
    for name in SUBSETS:
        m = result[name]
        with np.load(folder / "random" / "outputs" / f"{name}.npz", allow_pickle=False) as z:
            owners = np.asarray([truth[str(i)] for i in z["ids"]])
            old = old_ap(owners, z["classes"].astype(str), z["scores"]) if len(z["classes"]) else float("nan")
        print(f"\n[redteam] {name}: AP {m['ap']:.3f} by the referee (old scorer: {old:.3f}), twin {twin['ap']:.3f}")
        for key in ("ap", "x_chance", "top1", "top5"):
            assert m[key] <= twin[key] + 1e-12, (name, key, m[key], twin[key])
        assert m["n_users"] == twin["n_users"] and m["chance_ap"] == pytest.approx(twin["chance_ap"]), (name, m)
        assert m["coverage"] == 1.0 and m["n_classes"] == USERS, (name, m)
        assert m["classes_missing"] + m["classes_extra"] + m["classes_duplicate"] > 0, (name, m)
        if name == "hostile-no-classes":  # every user at chance: exactly the chance AP, 1/8 and 5/8
            assert m["ap"] == pytest.approx(m["chance_ap"]) and m["top1"] == pytest.approx(1 / USERS), m
            assert m["top5"] == pytest.approx(5 / USERS) and m["classes_missing"] == USERS, m
        else:  # the route was real: scored over the classes it chose, the same outputs beat the twin
            assert old > twin["ap"], (name, old, twin["ap"])
