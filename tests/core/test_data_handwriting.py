"""Style attributes measured from handwriting: bold strokes independent of the character, the
writer's weight and slant, and their appearance on the real FEMNIST writers."""

from __future__ import annotations

import numpy as np
import pytest

from leakbed.core.data.corpus import UserData
from leakbed.core.data.handwriting import ink, shear, with_style_attributes
from leakbed.core.data.leaf import load_leaf
from tests.conftest import SHARED_DATA


def _stroke(width: int, lean: float, size: int = 28) -> np.ndarray:
    """A vertical bar ``width`` pixels wide whose top is ``lean`` pixels right of its bottom."""
    img = np.zeros((1, size, size), np.float32)
    for row in range(4, size - 4):
        centre = size / 2 + lean * (size - 1 - row - size / 2) / size
        lo = int(round(centre - width / 2))
        img[0, row, lo : lo + width] = 1.0
    return img


def test_ink_and_shear_measure_weight_and_lean() -> None:
    thin, bold = _stroke(2, 0.0), _stroke(5, 0.0)
    assert ink(np.stack([bold]))[0] > 2 * ink(np.stack([thin]))[0]
    right, left, upright = (shear(np.stack([_stroke(3, d)]))[0] for d in (10.0, -10.0, 0.0))
    assert right > 0.2 and left < -0.2 and abs(upright) < 0.05


def _writer(rng: np.random.Generator, width: int, lean: float, n: int = 12) -> UserData:
    x = np.stack([_stroke(width + int(rng.integers(0, 2)), lean + rng.normal(0, 1)) for _ in range(n)])
    return UserData(x=x, y=rng.integers(0, 3, n), t=np.arange(n, dtype=np.float64))


def test_writers_get_their_weight_and_slant_tertiles() -> None:
    rng = np.random.default_rng(0)
    users = {f"w{i}": _writer(rng, width=2 + 2 * (i % 3), lean=-8.0 + 8.0 * (i // 3)) for i in range(9)}
    out = with_style_attributes(users)
    for i in range(9):
        a = out[f"w{i}"].attrs
        assert set(a) == {"property", "weight", "slant"}
        assert (a["weight"] == i % 3).all() and (a["slant"] == i // 3).all()  # constant per writer, ordered
    assert out["w2"].attrs["property"].mean() > 0.9 and out["w0"].attrs["property"].mean() < 0.1
    np.testing.assert_array_equal(out["w4"].x, users["w4"].x)  # the images themselves are untouched


@pytest.fixture(scope="module")
def femnist():
    return load_leaf(str(SHARED_DATA / "femnist"))


@pytest.mark.shared_data("femnist")
def test_femnist_bold_is_independent_of_the_character_but_not_of_the_writer(femnist) -> None:
    y = np.concatenate([d.y for d in femnist.users.values()])
    bold = np.concatenate([d.attrs["property"] for d in femnist.users.values()])
    assert abs(bold.mean() - 0.5) < 0.01
    for k in np.unique(y):
        if (y == k).sum() >= 100:
            assert abs(bold[y == k].mean() - 0.5) < 0.02, k  # half of every character is bold
    shares = np.array([d.attrs["property"].mean() for d in femnist.users.values() if len(d) >= 50])
    assert np.quantile(shares, 0.9) - np.quantile(shares, 0.1) > 0.6  # writers hold it at very different rates
    for name in ("weight", "slant"):
        counts = np.bincount([int(d.attrs[name][0]) for d in femnist.users.values()], minlength=3)
        assert counts.min() >= 55, (name, counts)  # tertiles over the 184 writers
