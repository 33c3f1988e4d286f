"""The run's DP noise secret (``referee.noise``): drawn from the OS once per prior and kept beside the truth (0600),
read back rather than redrawn, handed to a new run to reproduce a finished one (``leakbed run --noise-from``), and
refused in one line when there is none to hand back."""

from __future__ import annotations

import json
import stat

import pytest

from leakbed import cli
from leakbed.referee.noise import NOISE_FILE, hand_back, noise_secret


def test_a_secret_is_drawn_once_and_kept_private(tmp_path):
    folder = tmp_path / "referee" / "random"
    first = noise_secret(folder)
    assert 0 <= first < 2**128 and noise_secret(folder) == first  # kept: read back, not redrawn
    assert stat.S_IMODE((folder / NOISE_FILE).stat().st_mode) == 0o600
    assert noise_secret(tmp_path / "other") != first  # another run: the OS's randomness again


@pytest.mark.parametrize("text", ["", "{}", '{"noise_secret": -1}', '{"noise_secret": "7"}', '{"noise_secret": true}'])
def test_a_file_that_is_no_secret_is_refused(tmp_path, text):
    (tmp_path / NOISE_FILE).write_text(text)
    with pytest.raises(ValueError, match="noise secret"):
        noise_secret(tmp_path)


def test_hand_back_puts_each_priors_secret_in_the_new_run(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    kept = {rule: noise_secret(old / "referee" / rule) for rule in ("random", "chrono")}
    hand_back(old, new, ["random", "chrono"])
    for rule, secret in kept.items():
        assert noise_secret(new / "referee" / rule) == secret
        assert stat.S_IMODE((new / "referee" / rule).stat().st_mode) == 0o700
    hand_back(old, new, ["random"])  # the same secret again: nothing to do
    (new / "referee" / "random" / NOISE_FILE).write_text(json.dumps({"noise_secret": 5}))
    with pytest.raises(ValueError, match="another noise secret"):
        hand_back(old, new, ["random"])
    with pytest.raises(ValueError, match="not a kept noise secret"):
        hand_back(tmp_path / "nothing", tmp_path / "x", ["random"])


def test_run_refuses_a_noise_from_without_a_kept_secret_before_anything_starts(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "quickstart", "--noise-from", str(tmp_path / "missing"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("leakbed: error: ") and "not a kept noise secret" in err and err.count("\n") == 1
    assert not out.exists()
