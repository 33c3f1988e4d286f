"""Where runs go when no folder is given."""

from __future__ import annotations

import os
import time
from pathlib import Path


def default_run_dir(name: str, tag: str | None = None) -> Path:
    """``$LEAKBED_HOME/runs/<name>-<tag or UTC time>`` (LEAKBED_HOME defaults to ./ for the CLI)."""
    home = Path(os.environ.get("LEAKBED_HOME", "."))
    return home / "runs" / f"{name}-{tag or time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
