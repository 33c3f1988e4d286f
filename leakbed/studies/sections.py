"""Report sections owned by the analyses and participant attacks, rendered by ``leakbed.report``."""

from __future__ import annotations

from pathlib import Path


def participant_lines(rule: str, run: dict) -> list[str]:
    """Attacks by adversarial participants (devices), apart from the server's attacks."""
    lines = []
    for name, m in run.get("participant_attacks", {}).items():
        auc = "undefined" if m.get("auc") is None else f"{100 * m['auc']:.1f}%"  # shares in percent, as every table
        lines += [
            f"#### {name} ({rule} prior): {m['threat_model']}",
            "",
            f"- adversaries {', '.join(m['adversaries'])}, α = {m['alpha']}: ROC AUC {auc} (chance 50%) over "
            f"{m['observations']} observed rounds ({m['positive_rounds']} with the property in another participant's batch)",
            *[f"- {n}" for n in m.get("notes", [])],
            "",
        ]
    return lines


def analysis_lines(run_dir: Path) -> list[str]:
    """Every analysis written into ``run_dir/analyses`` by ``leakbed analyze``."""
    return [p.read_text() for p in sorted((run_dir / "analyses").glob("*.md"))]
