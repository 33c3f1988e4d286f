"""``leakbed open-world-sweep``: open-world re-identification and matching at several shares of
seen users, in the form of seed 001 Figure 6 (§6.1.2).

The seen share changes only what the attacker knows, not the federation, so one FL run (chrono
prior by default, as the seed's figure) is trained once and its stored updates are re-attacked at
every share: the holdout third stays fixed and the seen set grows inside the rest
(``attacks.open_world.split_users``). Each share is a variant of the run's open-world attack
(``seen_fraction`` overridden), fitted by sandboxed attack workers on the run's own store and scored by
its referee-side scorer. Writes ``open_world.json``, ``open_world.png`` and ``report.md``; a finished FL
run in the folder is reused, so a re-run only re-fits the attacks.
"""

from __future__ import annotations

import json
from pathlib import Path

from leakbed.core.config import ConfigError, ExperimentConfig
from leakbed.core.declaration import ParamsError, check_params
from leakbed.core.errors import Failed
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.layout import RunLayout
from leakbed.core.store import UpdateStore
from leakbed.core.tables import markdown_table
from leakbed.referee.context import ParamsView, ScoreContext
from leakbed.referee.scorers import score_one
from leakbed.referee.truth import Referee
from leakbed.studies.pools import declarations_of
from leakbed.workers import AttackPool, Fit
from leakbed.workers.sandbox import limits_for

ATTACK = "open-world"

DEFAULT_SEEN = (0.0, 0.25, 0.5, 0.75, 1.0)


def parse_seen(text: str) -> list[float]:
    """``"0,0.5,1"`` → shares of seen users, each in [0, 1], distinct."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--seen {text!r}: expected comma-separated shares in [0, 1]") from None
    if not values or any(not 0.0 <= v <= 1.0 for v in values) or len(set(values)) != len(values):
        raise ConfigError(f"--seen {text!r}: expected distinct comma-separated shares in [0, 1]")
    return sorted(values)


def sweep_config(cfg: ExperimentConfig, prior: str) -> ExperimentConfig:
    """The FL run's config: one prior, open-world enabled."""
    if prior not in ("random", "chrono"):
        raise ConfigError(f"--prior {prior!r}: expected random or chrono")
    suite = cfg.attack.suite if "open-world" in cfg.attack.suite else [*cfg.attack.suite, "open-world"]
    attack = cfg.attack.model_copy(update={"suite": suite})
    return ExperimentConfig.model_validate(
        {**cfg.model_dump(), "split": {**cfg.split.model_dump(), "priors": [prior]}, "attack": attack.model_dump()}
    )


def variant(seen: float) -> str:
    return f"{ATTACK}-seen{round(seen * 1000):04d}"


def attack_at(cfg: ExperimentConfig, run_dir: Path, prior: str, seen: list[float]) -> dict[float, dict]:
    """Re-fit open-world re-identification and matching on the stored run at every seen share, in sandboxed
    attack workers; score each with the attack's scorer."""
    layout = RunLayout(run_dir)
    store = UpdateStore(layout.store(prior))
    decl = declarations_of(cfg, [ATTACK])[ATTACK]
    try:
        table = check_params(decl, cfg.attack.params.get(ATTACK), f"attack.params.{ATTACK}")
    except ParamsError as err:
        raise ConfigError(str(err)) from None
    w = cfg.workers
    pool = AttackPool(
        AttackerKnowledge.load(store.root),
        str(layout.store_root),
        declarations={ATTACK: decl},
        params={ATTACK: table},
        outputs=layout.outputs(prior),
        count=w.count,
        sandbox=limits_for(w)[0],
        log_dir=layout.logs(),
        run_id=layout.run_id(prior),
        task_deadline=w.task_deadline,
        max_result_mb=w.limits.result,
        shadow=False,
    )
    try:
        pool.fit([Fit(ATTACK, output=variant(s), params={"seen_fraction": s}) for s in seen])
    finally:
        pool.close()
    truth, out = Referee.load(layout.referee(prior)), {}
    for s in seen:
        if not pool.stats.fitted(variant(s)):
            raise Failed(f"the open-world fit at seen share {s:g} failed: {'; '.join(pool.stats.errors[-2:])}",
                         "open-world sweep")
        params = ParamsView({**table, "seen_fraction": s})
        ctx = ScoreContext(ATTACK, variant(s), params, decl.scoring, truth, store, cfg, prior, layout.results(prior),
                           layout.outputs(prior))
        m = score_one(decl, ctx)
        m.pop("notes", None)
        out[s] = m
    return out


def plot(results: dict[float, dict], path: Path, title: str) -> None:
    """Two panels as the seed's Figure 6: re-identification (MLP) and matching (Siamese) AP against
    the share of seen users among the test users, with chance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = sorted(results)
    x = [100 * results[s]["seen_users"] / max(1, results[s]["seen_users"] + results[s]["unseen_users"]) for s in shares]
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.5, 3.4))
    for ax, key, chance, label in (
        (a, "ap", "chance_ap", "Re-identification (MLP)"),
        (b, "match_ap", "match_chance", "Matching (Siamese)"),
    ):
        ys = [100 * results[s][key] for s in shares]
        cs = [100 * results[s][chance] for s in shares]
        ax.plot(x, ys, "o-", color="tab:blue", label="attack")
        ax.plot(x, cs, "s--", color="tab:gray", label="chance")
        for xi, yi, ci in zip(x, ys, cs, strict=True):
            if yi == yi and ci == ci and ci > 0:
                ax.annotate(f"{yi / ci:.1f}×", (xi, yi), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
        ax.set_xlabel("% seen users at test time")
        ax.set_ylabel("AP (%)")
        ax.set_ylim(0, 105)
        ax.set_xlim(-5, 105)
        ax.set_title(label, fontsize=10)
        ax.legend(fontsize=8, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def holdout_fraction(cfg: ExperimentConfig) -> float:
    """The open-world attack's share of holdout users, as its declaration completes the run's parameters."""
    decl = declarations_of(cfg, [ATTACK])[ATTACK]
    return float(check_params(decl, cfg.attack.params.get(ATTACK), f"attack.params.{ATTACK}")["holdout_fraction"])


def report(results: dict[float, dict], out: Path, cfg: ExperimentConfig, prior: str, lost: tuple[int, int] = (0, 0)) -> Path:
    pct = lambda v: "n/a" if v != v else f"{100 * v:.1f}"  # noqa: E731
    lines = [
        "# Open-world re-identification and matching (seed 001 §6.1.2, Figure 6 form)",
        "",
        f"{cfg.name}, {prior} prior, {cfg.fl.rounds} rounds; holdout users (train the 'unseen' class): "
        f"{holdout_fraction(cfg):.2f} of the users. AP in %, chance in brackets.",
        "",
        *(
            [f"**Warning: {lost[0]} of {lost[1]} sampled device replies failed; the attacks saw only the rest.**", ""]
            if lost[0]
            else []
        ),
    ]
    header = ["seen share", "seen / unseen users", "re-id AP", "× chance", "unseen recall", "seen top-1", "matching AP",
              "× chance"]  # fmt: skip
    rows = [
        [f"{s:.2f}", f"{m['seen_users']} / {m['unseen_users']}", f"{pct(m['ap'])} ({pct(m['chance_ap'])})",
         f"{m['x_chance']:.1f}", pct(m["unseen_recall"]), pct(m["seen_top1"]),
         f"{pct(m['match_ap'])} ({pct(m['match_chance'])})", f"{m['match_x_chance']:.2f}"]
        for s, m in sorted(results.items())
    ]  # fmt: skip
    lines += [markdown_table(header, rows), "", "![open world](open_world.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def run_sweep(cfg: ExperimentConfig, prior: str, seen: list[float], out: Path, run_fl) -> Path:  # noqa: ANN001 - the CLI's run_experiment
    """Train once (unless ``out/run`` holds the finished run), then attack and score at every share."""
    run = out / "run" / prior
    if not (run / "metrics.json").exists():
        if (out / "run").exists() and any((out / "run").iterdir()):
            raise ConfigError(f"--out {out}: holds an unfinished run; remove {out / 'run'} to start again")
        run_fl(cfg, out / "run")
    results = attack_at(cfg, out / "run", prior, seen)
    (out / "open_world.json").write_text(json.dumps({str(s): m for s, m in results.items()}, indent=2, default=float))
    plot(results, out / "open_world.png", f"{cfg.name}: open world, {prior} prior")
    log = json.loads((run / "metrics.json").read_text()).get("rounds_log", {}).values()
    lost = (sum(r.get("failed", 0) for r in log), sum(r.get("sampled", 0) for r in log))
    return report(results, out, cfg, prior, lost)
