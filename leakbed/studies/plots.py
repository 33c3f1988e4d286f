"""Shared output helpers: an analysis' markdown file (its table written by ``core.tables``) and its matplotlib (Agg)
figure."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def write(out: Path, name: str, title: str, intro: str, md_table: str, result: dict, fig) -> Path:
    """``out/<name>.md`` (title, text, table, figure link), ``<name>.json`` and ``<name>.png``."""
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, default=float))
    md = out / f"{name}.md"
    md.write_text(f"### {title}\n\n{intro}\n\n{md_table}\n\n![{name}](analyses/{name}.png)\n")
    return md


def pct(ap: float, chance: float) -> str:
    return f"{100 * ap:.1f} ({ap / chance:.1f}×)" if chance > 0 else f"{100 * ap:.1f}"
