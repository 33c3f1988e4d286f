"""No choice of a subset of an honest output scores above the output itself (issue 38, item 3).

For every scorer kind, hypothesis draws a subset of the honest output's rows, of its classes (users, seen classes,
attribute columns, shadow users, reconstructed samples), or of both (``tests/referee/cases.py``), and the referee
scores it. What the referee guarantees, and what is checked:

- the sets are the referee's: every chance figure and denominator of the subset's result is the output's own;
- an omitted part counts at chance, so in expectation over the referee's draws (each draw's fill seeded by another
  attack name) no headline number of the subset is above the output's. The honest outputs beat chance on every part
  they could leave out (``cases.py``): that is the condition the guarantee needs. A subset of an output that is worse
  than chance on some part gains exactly what that part lacked (a row the output ranked wrong, left out, is a random
  guess instead): ``test_an_omission_is_worth_exactly_chance`` pins that down for the ranking kinds, where it is exact.

Reconstruction's updates are the one set an attack still picks (its module says why); its samples are drawn here.
"""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakbed.core.reid_metrics import random_ranking_ap, reid_metrics
from tests.referee.cases import CASES, USERS, Case, value

DRAWS = 4  # the referee's fills averaged per subset (each seeded by another attack name)
TOLERANCE = 0.01  # what 4 draws leave of the fills' noise
# The figures two scorers draw from numbers they have already computed (a PNG, named in the result's "figures"): no
# headline number reads them, and drawing them was ~85% of those kinds' scoring (~0.4 s a draw, 40 draws a kind).
# The subsets' draws name the file without drawing it; the honest output's own scoring (``runs``) still draws both.
FIGURES = {
    "leakbed.referee.score_property._timeline": "property_timeline.png",
    "leakbed.referee.score_profile._figure": "profile_top_users.png",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, dict]]:
    """Each kind's run, filed once (hypothesis calls a test many times), with its honest output's result."""
    built = {}
    for kind, make in CASES.items():
        c = make(tmp_path_factory.mktemp(f"subsets-{kind}"))
        built[kind] = (c, c.score())
    return built


def mean_score(c: Case, rows: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    """Each headline number of the subset, averaged over the referee's fills."""
    with warnings.catch_warnings(), ExitStack() as undrawn:
        warnings.simplefilter("ignore")  # sklearn warns when a drawn round or user has one class only
        for target, name in FIGURES.items():
            undrawn.enter_context(mock.patch(target, return_value=name))
        results = [c.score(rows, classes, f"subset-{k}") for k in range(DRAWS)]
    return {key: float(np.nanmean([value(r, key) for r in results])) for key in c.headline} | {"_first": results[0]}  # type: ignore[dict-item]


@st.composite
def subsets(draw: st.DrawFn, c: Case) -> tuple[np.ndarray, np.ndarray]:
    """Rows, classes or both: each a boolean mask, the other axis whole."""
    axes = ["rows", "classes", "both"] if c.n_classes else ["rows"]
    if not c.rows_drawn:
        axes = ["classes"]
    axis = draw(st.sampled_from(axes))
    rows = np.ones(c.n_rows, bool)
    classes = np.ones(c.n_classes, bool)
    if axis in ("rows", "both"):
        rows = np.asarray(draw(st.lists(st.booleans(), min_size=c.n_rows, max_size=c.n_rows)), bool)
    if axis in ("classes", "both"):
        classes = np.asarray(draw(st.lists(st.booleans(), min_size=c.n_classes, max_size=c.n_classes)), bool)
    return rows, classes


def test_every_kind_has_a_case():
    from leakbed.referee.kinds import KINDS

    assert set(CASES) == set(KINDS)


@pytest.mark.parametrize("kind", list(CASES))
def test_the_honest_output_beats_chance_and_covers_everything(kind, runs):
    c, m = runs[kind]
    assert m.get("coverage", 1.0) == 1.0 and m.get("rows_missing", 0) == 0, m
    assert m.get("classes_missing", 0) == m.get("classes_extra", 0) == m.get("classes_duplicate", 0) == 0, m
    for key in c.headline:
        assert np.isfinite(value(m, key)), (key, m)


@pytest.mark.long
@pytest.mark.parametrize("kind", list(CASES))
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_subset_of_an_honest_output_scores_above_it(kind, runs, data):
    c, full = runs[kind]
    rows, classes = data.draw(subsets(c))
    sub = mean_score(c, rows, classes)
    first = sub.pop("_first")
    for key in c.chance:  # the referee's sets: nothing the subset chose moves a chance figure or a denominator
        assert value(first, key) == pytest.approx(value(full, key)), (key, value(first, key), value(full, key))
    if "n_updates" in full:
        assert first["n_updates"] == full["n_updates"]
    for key, got in sub.items():
        assert got <= value(full, key) + TOLERANCE, (kind, key, got, value(full, key), int(rows.sum()), int(classes.sum()))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.data())
def test_an_omission_is_worth_exactly_chance(data):
    """For any output (here: random, so often worse than chance), leaving out classes changes the mean AP by exactly
    what those classes lacked of their chance AP, and leaving out rows changes top-k by exactly what those rows lacked
    of k / |users|: nothing else moves."""
    n, k = 24, len(USERS)
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    owners = USERS[rng.integers(0, k, n)]
    scores = rng.random((n, k))
    keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=k, max_size=k)), bool)
    full = reid_metrics(owners, USERS, scores)
    cut = scores.copy()
    cut[:, ~keep] = np.nan  # a class the attack left out (``ClassCoverage.widen``)
    sub = reid_metrics(owners, USERS, cut)
    present = [j for j in range(k) if (owners == USERS[j]).any()]
    from sklearn.metrics import average_precision_score

    ap = {j: average_precision_score(owners == USERS[j], scores[:, j]) for j in present}
    chance = {j: random_ranking_ap(int((owners == USERS[j]).sum()), n) for j in present}
    assert sub["ap"] == pytest.approx(np.mean([ap[j] if keep[j] else chance[j] for j in present]))
    assert sub["chance_ap"] == full["chance_ap"] and sub["n_users"] == full["n_users"]
    dropped = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    rows = reid_metrics(owners, USERS, scores, filled=dropped)
    ranked = USERS[np.argsort(-scores, axis=1)]
    hit = {1: ranked[:, 0] == owners, 5: (ranked[:, :5] == owners[:, None]).any(axis=1)}
    for top in (1, 5):
        want = (hit[top][~dropped].sum() + dropped.sum() * min(top, k) / k) / n
        assert rows[f"top{top}"] == pytest.approx(want)
