"""The run's DP noise secret, kept beside the truth.

DP noise drawn from the experiment seed can be regenerated, and removed, by anyone holding the config: it is drawn
instead from a 128-bit secret the referee draws from the OS at the start of a prior's run and keeps in its own
folder (``NOISE_FILE``, mode 0600), which nothing handed to the attack side leads to. A run is reproduced exactly on
request (``leakbed run --noise-from RUN_DIR``, ``hand_back``): each prior's kept secret is put into the new run's
referee folder before it starts, and a secret already there is used, not redrawn. Without it the same seed and config
reproduce everything the noise does not touch (data, splits, device sampling, the canaries' directions and inclusion,
round 1's updates), and nothing that depends on the noise (every later model, the scores, the audit's estimates).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from leakbed.core.config import ConfigError
from leakbed.core.layout import RunLayout
from leakbed.core.secret_noise import SECRET_BITS, new_secret

NOISE_FILE = "noise-secret.json"


def _kept(path: Path) -> int:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))["noise_secret"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{path}: not a kept noise secret ({err})") from err
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**SECRET_BITS:
        raise ConfigError(f"{path}: the noise secret must be an integer in [0, 2**{SECRET_BITS})")
    return value


def _keep(path: Path, secret: int) -> bool:
    """Write ``secret`` to ``path`` (0600, never over an existing file); False when one is there already."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"noise_secret": secret}, f)
    return True


def noise_secret(folder: str | Path) -> int:
    """The secret kept in ``folder``, or a fresh one from the OS, kept there (created once, never overwritten)."""
    folder = Path(folder)
    path = folder / NOISE_FILE
    if path.exists():
        return _kept(path)
    folder.mkdir(parents=True, exist_ok=True)
    secret = new_secret()
    return secret if _keep(path, secret) else _kept(path)  # another process of the run drew first: theirs counts


def hand_back(source: str | Path, target: str | Path, priors: list[str]) -> None:
    """Reproduce the DP noise of the finished run ``source`` in the run ``target`` (not started): each prior's kept
    secret put into ``target``'s referee folder. ValueError (one line) for a prior ``source`` kept none of."""
    kept = {rule: _kept(RunLayout.from_env(Path(source)).referee(rule) / NOISE_FILE) for rule in priors}
    for rule, secret in kept.items():
        give_secret(RunLayout.from_env(Path(target)).referee(rule), secret)


def give_secret(folder: Path, secret: int) -> None:
    """Keep ``secret`` in the referee folder ``folder`` of a run not started (0700), where ``noise_secret`` will find
    it instead of drawing one; ConfigError (one line) when another secret is kept there already."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    if not _keep(folder / NOISE_FILE, secret) and _kept(folder / NOISE_FILE) != secret:
        raise ConfigError(f"{folder / NOISE_FILE}: holds another noise secret")
