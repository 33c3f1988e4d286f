"""What a run folder says when its command was stopped: ``interrupted.json`` and a short ``report.md``.

An interrupted run keeps everything it wrote (the finished priors' metrics and reports, the interrupted prior's store,
sealed truth and progress); this records where it stopped, so a reader (and a sweep resuming) can tell it apart from
a finished run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from leakbed.core.config import ExperimentConfig
from leakbed.core.layout import RunLayout

INTERRUPTED = "interrupted.json"
PROGRESS_FILE = "progress.json"  # a prior's last finished round and its utility (leakbed.apps writes it)


def where_stopped(cfg: ExperimentConfig, run_dir: Path) -> dict[str, dict]:
    """Each prior's state: finished, interrupted at round N (its last finished round), or not started."""
    layout = RunLayout(run_dir)
    out: dict[str, dict] = {}
    for rule in cfg.split.priors:
        folder = layout.results(rule)
        if (folder / "metrics.json").exists():
            out[rule] = {"state": "finished"}
        elif folder.exists() or layout.referee(rule).exists():
            out[rule] = {"state": "interrupted", **_where(folder / PROGRESS_FILE), "rounds": cfg.fl.rounds}
            out[rule]["phase"] = "attacks" if out[rule]["round"] >= cfg.fl.rounds else "rounds"
        else:
            out[rule] = {"state": "not started"}
    return out


def _where(progress: Path) -> dict:
    """The last finished round a prior's progress file names (0 when there is none yet, or it is unreadable) and the
    attack side's figures beside it (``analysed`` rounds, ``fits``, ``fitted``), where it has them."""
    try:
        doc = json.loads(progress.read_text(encoding="utf-8"))
        rnd = int(doc["round"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"round": 0}
    attack = doc.get("attack") if isinstance(doc.get("attack"), dict) else {}
    figures = {k: int(v) for k, v in attack.items() if k in ("analysed", "fits", "fitted") and isinstance(v, int | float)}
    return {"round": rnd, **({"attack": figures} if figures else {})}


def stopped_text(rule: str, state: dict) -> str:
    """Where one prior stopped, in words: ``the random prior interrupted at round 3 of 20`` while it trained; ``the
    chrono prior interrupted after its 20 FL rounds, while its attacks were fitted and scored (...)`` once every round
    had finished; ``the random prior finished`` or ``not started``."""
    if state["state"] != "interrupted":
        return f"the {rule} prior {state['state']}"
    if state.get("phase") != "attacks":
        return f"the {rule} prior interrupted at round {state['round']} of {state['rounds']}"
    figures = state.get("attack", {})
    done = [f"{figures['analysed']} of {state['rounds']} rounds analysed"] if "analysed" in figures else []
    done += [f"{figures.get('fitted', 0)} of {figures['fits']} fits done"] if figures.get("fits") else []
    where = f" ({', '.join(done)})" if done else ""
    return f"the {rule} prior interrupted after its {state['rounds']} FL rounds, while its attacks were fitted and scored{where}"


def mark_interrupted(cfg: ExperimentConfig, run_dir: Path, signal_name: str) -> str:
    """Write ``interrupted.json`` (and, where no report was written, a ``report.md`` saying so); returns one line."""
    if not run_dir.exists():
        return f"interrupted ({signal_name}) before anything was written"
    priors = where_stopped(cfg, run_dir)
    doc = {"signal": signal_name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "priors": priors}
    (run_dir / INTERRUPTED).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    parts = [stopped_text(rule, state) for rule, state in priors.items()]
    line = f"interrupted ({signal_name}): {'; '.join(parts)}; what was written is kept in {run_dir}"
    report = run_dir / "report.md"
    if not report.exists():
        report.write_text(f"# leakbed report\n\n**Interrupted ({signal_name})**: {'; '.join(parts)}.\n", encoding="utf-8")
    return line


def interrupted(run_dir: Path) -> bool:
    return (run_dir / INTERRUPTED).exists()
