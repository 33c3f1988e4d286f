"""The red team against the two boundaries every plugin byte crosses: text (``core.plugin_text``) and numbers
(``workers.numbers``), and against plugin-scored numbers passing for the referee's (issue 38, items 5-7).

Hostile attacks (``tests/redteam/hostile``: ``leakbed_hostile.forgery`` and ``.frames``, with ``hostile-forge`` and
``hostile-lastwords`` for errors and last words) are installed by hand, as pip leaves a distribution
(``tests/redteam/handmade.py``), into an environment of this module's own that an ordinary user can read; beside
them, ``leakbed-hostile-escapes`` publishes an entry point whose name, and another whose value, carry terminal
escapes. One small run (6 users, 1 round: no route here reads a second; seed 7, one ClientApp actor) holds every
attack beside ``knn`` and ``metadata``; each test reads one route's evidence from what trusted code wrote and
printed. It runs as the user who runs pytest only: every route here is trusted code reading bytes a plugin wrote
(text, numbers, scores), and the bytes and the code are the same whoever runs them; the routes where the uid matters
(sandboxes that share one) are ``test_sandboxes.py``'s and ``test_declarations.py``'s, run both ways. Routes, what
the adversary tried, and what holding means:

- forged report structure (``hostile-forged-notes``): its scorer's notes, tables and figure names, and its declared
  notes, forge a ``## Verdict (leakbed)`` section, a table, remote images, a ``javascript:`` link, HTML. Holds: the
  report, parsed as GitHub would, has no heading, table, link, image or HTML that leakbed did not write; its words
  are there, as text, labelled.
- terminal escapes (``hostile-forged-notes``, ``hostile-forge``, ``hostile-lastwords``, ``leakbed-hostile-escapes``):
  in notes, errors, last words, entry-point names and values. Holds: no escape, control or bidi byte in the report,
  metrics, stdout, stderr or an error line.
- Prometheus label injection and exports named after other attacks (``hostile-forged-notes``'s exports ``knn``,
  ``metadata``, ``../x``, a label breaker). Holds: kNN's and metadata's series are their own values; the plugin's
  are ``scorer="plugin"`` under ``hostile-forged-notes/...``.
- a plugin-scored row in the headline table (``hostile-plugin-reid``: AP 1.0 by its own scorer). Holds: in no
  headline table, marked in the report, the console, metrics.json (``plugin_scored``) and Prometheus.
- a scorer missing a field, one that raises, one with huge numbers (``hostile-missing-field``,
  ``-scorer-raises``, ``-huge-exports``). Holds: the run ends 0 with its report; each is its own row or failure.
- huge, negative and NaN frame headers (``hostile-huge-seconds``, ``-negative-seconds``, ``-nan-seconds``). Holds:
  each fit fails in one line at once (no retry, no lane thread lost, not its deadline); the others finish.
- a budget over the run's deadline (``hostile-long-budget``: a million seconds). Holds: ended at
  ``workers.task_deadline``.
- malformed upstream outputs for a ``builds_on`` built-in (``hostile-bad-ranking`` under ``metadata``). Holds: not
  handed over, the refusal named on ``hostile-bad-ranking``; ``metadata`` is scored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from prometheus_client.parser import text_string_to_metric_families

from leakbed.report import PLUGIN_SECTION
from tests.redteam.handmade import Env, install, layered_env

pytestmark = pytest.mark.redteam
HOSTILE = Path(__file__).resolve().parent / "hostile"
DEADLINE_S = 40
SMALL = ["seed=7", "data.synthetic.users=6", "data.synthetic.examples_per_user=40", "data.synthetic.image_size=8",
         "fl.rounds=1", "fl.fraction_train=1.0", 'split.priors=["random"]', "workers.count=2",
         f"workers.task_deadline={DEADLINE_S}", "workers.limits.output=64", "workers.limits.tmp=64",
         "simulation.client_cpus=2"]  # fmt: skip
FRAMES = {"hostile-huge-seconds": "its seconds is an integer of 1329 bits, more than 2**53",
          "hostile-negative-seconds": "its seconds is -1, outside [0, ",
          "hostile-nan-seconds": "JSON holds NaN, refused"}  # fmt: skip
FORGERY = ["hostile-forged-notes", "hostile-plugin-reid", "hostile-missing-field", "hostile-scorer-raises",
           "hostile-huge-exports"]  # fmt: skip
SUITE = ["knn", "metadata", *FORGERY, *FRAMES, "hostile-long-budget", "hostile-bad-ranking", "hostile-forge",
         "hostile-lastwords"]  # fmt: skip
ESC_NAME = "hostile-esc\x1b]0;pwned\x07\x1b[2J\u202e"
ESC_VALUE = "leakbed_hostile.forgery:Gone\x1b[2J\x9b31m\x1b]8;;https://evil.example\x07"
ESCAPES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what no trusted output may hold
VERDICT = "Verdict (leakbed)"


@dataclass(frozen=True)
class Setup:
    env: Env
    folder: Path


def _entry_points() -> dict[str, str]:
    """This module's hostile attacks as the hostile package publishes them (its pyproject's entry points)."""
    eps = tomllib.loads((HOSTILE / "pyproject.toml").read_text())["project"]["entry-points"]["leakbed.attacks"]
    return {name: value for name, value in eps.items() if name in SUITE}


@pytest.fixture(scope="module")
def setup() -> Setup:
    folder = Path(tempfile.mkdtemp(prefix="leakbed-redteam-boundaries-", dir="/tmp"))
    env = layered_env(folder)
    src = HOSTILE / "src" / "leakbed_hostile"
    files = {f"leakbed_hostile/{p.name}": p.read_text() for p in src.glob("*.py")}
    install(env.site, "leakbed-hostile", files=files, top_level=("leakbed_hostile",), entry_points=_entry_points())
    install(env.site, "leakbed-hostile-escapes", files={"hostile_escapes/__init__.py": ""}, top_level=("hostile_escapes",),
            entry_points={ESC_NAME: "hostile_escapes:Attack", "hostile-escval": ESC_VALUE})  # fmt: skip
    yield Setup(env, folder)
    shutil.rmtree(folder, ignore_errors=True)


def leakbed(setup: Setup, args: list[str], tmp: Path, timeout: float = 1500) -> subprocess.CompletedProcess:
    """``<env>/bin/python -m leakbed.cli ARGS`` in a folder of its own, with a cache of its own."""
    command = [str(setup.env.python), "-m", "leakbed.cli", *args]
    cwd = Path(tempfile.mkdtemp(dir=tmp))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(LEAKBED_CACHE=str(setup.folder / "cache"), HOME=str(cwd), FLWR_TELEMETRY_ENABLED="0", COLUMNS="250")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class Run:
    folder: Path
    done: subprocess.CompletedProcess
    seconds: float

    @cached_property
    def metrics(self) -> dict:
        return json.loads((self.folder / "random" / "metrics.json").read_text())

    @cached_property
    def report(self) -> str:
        return (self.folder / "report.md").read_text()

    @cached_property
    def prom(self) -> dict[tuple[str, str, str], float]:
        """(metric, attack, scorer) -> value, from the run's final exposition (metrics.prom)."""
        text = (self.folder / "random" / "metrics.prom").read_text()
        return {(s.name, s.labels["attack"], s.labels["scorer"]): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples if "scorer" in s.labels}  # fmt: skip

    def errors(self, name: str) -> list[str]:
        return [e for e in self.metrics["pool"]["errors"] if f"'{name}'" in e]

    def texts(self) -> dict[str, str]:
        """Every text trusted code wrote or printed about the run."""
        return {"report.md": self.report, "metrics.json": (self.folder / "random" / "metrics.json").read_text(),
                "combined metrics.json": (self.folder / "metrics.json").read_text(),
                "metrics.prom": (self.folder / "random" / "metrics.prom").read_text(),
                "stdout": self.done.stdout, "stderr": self.done.stderr}  # fmt: skip


@pytest.fixture(scope="module")
def run(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("boundaries")
    out = tmp / "run"
    sets = [*SMALL, f"attack.suite={json.dumps(SUITE)}"]
    t0 = time.monotonic()
    done = leakbed(setup, ["run", "--out", str(out), *(a for s in sets for a in ("--set", s))], tmp)
    seconds = time.monotonic() - t0
    print(f"\n[redteam] boundaries run of {len(SUITE)} attacks: {seconds:.0f} s, rc {done.returncode}")
    assert done.returncode == 0, done.stderr[-4000:]  # a scorer missing a field no longer costs the run its report
    return Run(out, done, seconds)


def _walk(tokens: list) -> list:
    out = []
    for t in tokens:
        out.append(t)
        out += _walk(t.children or [])
    return out


# --- text -----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_forged_report_structure_renders_as_the_plugins_words(run: Run) -> None:
    md = MarkdownIt("gfm-like")
    md.linkify.set({"fuzzy_link": False})
    tokens = _walk(md.parse(run.report))
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "html_inline", "html_block", "fence", "code_block", "blockquote_open"}, kinds
    assert [t.attrs["src"] for t in tokens if t.type == "image"] == ["reid_by_round.png"]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert all(h in ("leakbed report", "Per prior", "random prior", "Further attacks", PLUGIN_SECTION)
               or re.fullmatch(r"[a-z][a-z0-9-]* \(random prior\)(, scored by its plugin)?", h) for h in headings), headings
    results = [*run.metrics["suite"].values(), *run.metrics["plugin_scored"].values()]
    laid_out = 1 + sum(len(m.get("tables", {})) for m in results)  # the closed-world table and each result's
    assert sum(t.type == "table_open" for t in tokens) == laid_out
    assert not [line for line in run.report.splitlines() if line.lstrip("#> ").startswith(VERDICT)]
    notes = run.report.split("#### hostile-forged-notes (random prior), scored by its plugin", 1)[1].split("####", 1)[0]
    assert "- the plugin's scorer notes: ok" in notes and VERDICT in notes and "https\\[:\\]//evil.example" in notes
    assert "etc/passwd" not in run.report and "figure.png" not in run.report  # figures a plugin named: not shown


@pytest.mark.slow
def test_no_escape_byte_reaches_any_output(run: Run) -> None:
    for where, text in run.texts().items():
        if where == "stderr":  # Flower and Ray colour their own log lines; leakbed's lines hold no escape
            text = "\n".join(line for line in text.splitlines() if line.startswith("leakbed"))
        assert not ESCAPES.search(text), (where, ESCAPES.search(text), text[max(0, ESCAPES.search(text).start() - 80):][:160])
    said = [e for e in run.errors("hostile-forge") + run.errors("hostile-lastwords") if "said" in e]
    assert said and all("\n" not in e and len(e) <= 800 for e in said), said


@pytest.mark.slow
def test_escapes_in_entry_point_names_and_values_never_reach_the_console(setup: Setup, tmp_path: Path) -> None:
    sets = [*SMALL, 'attack.suite=["no-such-attack"]']
    unknown = leakbed(setup, ["validate", *(a for s in sets for a in ("--set", s))], tmp_path, timeout=600)
    value = leakbed(setup, ["validate", *(a for s in [*SMALL, 'attack.suite=["hostile-escval"]']
                                               for a in ("--set", s))], tmp_path, timeout=600)  # fmt: skip
    listed = leakbed(setup, ["plugins"], tmp_path, timeout=600)
    as_json = leakbed(setup, ["plugins", "--json"], tmp_path, timeout=600)
    for done, says in ((unknown, "unknown attack 'no-such-attack'"), (value, "hostile-escval")):
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr[-2000:]
        assert not ESCAPES.search(done.stderr), done.stderr
    assert "hostile-esc" in unknown.stderr and "Gone" in value.stderr  # named, cleaned
    assert listed.returncode == 0 and "hostile-esc" in listed.stdout and not ESCAPES.search(listed.stdout)
    escapes = next(d for d in json.loads(as_json.stdout) if d["name"] == "leakbed-hostile-escapes")
    names = [text for entry in escapes["entry_points"] for text in entry]  # decoded: no escape hides in \u001b
    assert any(n.startswith("hostile-esc") for n in names) and not [n for n in names if ESCAPES.search(n)], names


# --- plugin-scored numbers ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_plugin_scored_row_is_in_no_headline_table_and_marked_everywhere(run: Run) -> None:
    m = run.metrics
    assert set(m["attackers"]) == {"knn"}, set(m["attackers"])
    plugin = m["plugin_scored"]
    assert {"hostile-plugin-reid", "hostile-missing-field", "hostile-forged-notes"} <= set(plugin), set(plugin)
    assert all(row["scored_by"] == "plugin" for row in plugin.values())
    assert plugin["hostile-plugin-reid"]["ap"] == 1.0 and plugin["hostile-missing-field"] == {"ap": 0.99, "scored_by": "plugin"}
    table = run.report.split("| attacker |", 1)[1].split("\n\n", 1)[0]
    assert "hostile" not in table and "100.0 (100×)" not in table
    combined = json.loads((run.folder / "metrics.json").read_text())
    assert set(combined["random"]) == {"knn"} and combined["plugin_scored"]["random"]["hostile-plugin-reid"]["ap"] == 1.0
    assert f"## {PLUGIN_SECTION}" in run.report and "#### hostile-plugin-reid (random prior), scored by its plugin" in run.report
    console = run.done.stdout
    assert PLUGIN_SECTION in console and "hostile-plugin-reid (plugin-scored)" in console
    assert console.index(PLUGIN_SECTION) > console.index("Re-identification (closed world)")
    assert run.prom[("leakbed_attack_ap", "hostile-plugin-reid", "plugin")] == 1.0
    assert ("leakbed_attack_ap", "hostile-plugin-reid", "referee") not in run.prom


@pytest.mark.slow
def test_exports_named_after_other_attacks_touch_only_the_plugins_own_series(run: Run) -> None:
    knn, meta = run.metrics["attackers"]["knn"], run.metrics["suite"]["metadata"]
    assert run.prom[("leakbed_attack_ap", "knn", "referee")] == pytest.approx(knn["ap"]) != 1.0
    assert run.prom[("leakbed_attack_x_chance", "knn", "referee")] == pytest.approx(knn["x_chance"])
    for export, values in meta.get("exports", {}).items():
        assert run.prom[("leakbed_attack_ap", export, "referee")] == pytest.approx(values["ap"])
    plugin = sorted(a for (name, a, scorer) in run.prom if scorer == "plugin" and name == "leakbed_attack_ap")
    forged = [a for a in plugin if a.startswith("hostile-forged-notes/")]  # "\x1b[2Jknn" is "knn" once cleaned: one row
    assert sorted(forged) == ["hostile-forged-notes/../x", "hostile-forged-notes/knn", "hostile-forged-notes/metadata",
                              "hostile-forged-notes/x___1_leakbed_attack_ap_attack__knn"], plugin  # fmt: skip
    assert all(re.fullmatch(r"[A-Za-z0-9_.:/+-]+", a) for a in plugin), plugin
    assert not [k for k in run.prom if k[1] in ("knn", "metadata") and k[2] == "plugin"]


@pytest.mark.slow
def test_a_failing_or_incomplete_scorer_is_its_own_row_alone(run: Run) -> None:
    failed = run.metrics["attackers_failed"]
    assert "KeyError" in failed["hostile-scorer-raises"] and "said" in failed["hostile-scorer-raises"], failed
    assert "refused" in failed["hostile-huge-exports"] and "1329 bits" in failed["hostile-huge-exports"], failed
    assert "hostile-missing-field" in run.metrics["plugin_scored"] and "knn" in run.metrics["attackers"]
    assert (run.folder / "report.md").is_file() and "metadata" in run.metrics["suite"]
    assert "#### hostile-missing-field (random prior), scored by its plugin" in run.report


# --- numbers ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_malformed_frame_headers_fail_their_fit_in_one_line_at_once(run: Run) -> None:
    pool = run.metrics["pool"]
    for name, says in FRAMES.items():
        errors = run.errors(name)
        assert len(errors) == 1, errors  # no retry: a second lane is not sent the same task
        assert errors[0].startswith(f"fit task of attack '{name}' failed: attack '{name}' sent a malformed reply (")
        assert says in errors[0] and "\n" not in errors[0], errors
        assert name in run.metrics["attackers_failed"]
    assert not [e for e in pool["errors"] if "did not finish in time" in e], pool["errors"]
    assert pool["deadlines"] == 1  # the long budget's alone: no fit waited out its deadline for a lost thread


@pytest.mark.slow
def test_a_budget_longer_than_the_runs_deadline_is_cut_to_it(run: Run) -> None:
    assert run.errors("hostile-long-budget") == [
        f"deadline: fit task past its deadline of {DEADLINE_S} s: attack 'hostile-long-budget' was ended"
    ]
    assert run.seconds < 900, run.seconds


@pytest.mark.slow
def test_malformed_upstream_outputs_are_refused_where_they_were_made(run: Run) -> None:
    refused = [e for e in run.metrics["pool"]["errors"] if "not handed to attack 'metadata'" in e]
    assert refused == [
        "attack 'hostile-bad-ranking''s outputs were not handed to attack 'metadata', which builds on them: array 'scores' "
        "has shape (6,), expected 2 dims ('n', 'k')"  # one score per update: 6 users, 1 round
    ], refused
    assert "metadata" in run.metrics["suite"] and "metadata" not in run.metrics["attackers_failed"]
    assert "hostile-bad-ranking" in run.metrics["attackers_failed"]  # its own row fails, where it happened
    assert not [e for e in run.metrics["pool"]["errors"] if "attack 'metadata' failed" in e]
