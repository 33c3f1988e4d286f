"""The docs site builds strict (a warning or a broken link fails), and its reference pages are the code's own:
every config option, CLI command, Prometheus metric and published plugin appears, with what defines it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"


def _docs_tree() -> dict[str, tuple[int, int]]:
    """Every file under docs/ with its modification time and size."""
    return {str(p.relative_to(DOCS)): (p.stat().st_mtime_ns, p.stat().st_size) for p in DOCS.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """The site built into a folder of its own, with the docs/ tree before and after the build."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out), "-f", str(REPO / "mkdocs.yml")]
    before = _docs_tree()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, before, _docs_tree()


@pytest.fixture(scope="module")
def site(built: tuple[Path, dict, dict]) -> Path:
    return built[0]


def _page(name: str) -> str:
    """A generated reference page's markdown, as the code makes it (the committed page is the same: test_reference_pages)."""
    from leakbed.reference.pages import PAGES

    return PAGES[name]()


def test_the_build_leaves_the_checkouts_docs_folder_alone(built: tuple[Path, dict, dict]) -> None:
    site, before, after = built
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not changed, f"the docs build wrote into docs/: {changed}"  # it reads the committed reference pages
    assert (site / "reference" / "catalog" / "index.html").is_file()


def test_the_site_builds_with_every_reference_page(site: Path) -> None:
    for name in ("config", "cli", "metrics", "catalog", "plugin-api", "imports"):
        assert (site / "reference" / name / "index.html").stat().st_size > 2000, name


def test_every_config_option_is_in_the_reference_with_its_unit_and_bound(site: Path) -> None:
    from leakbed.core.config import ExperimentConfig
    from leakbed.reference.fields import rows

    page = _page("config.md")
    found = rows(ExperimentConfig)
    assert len(found) > 60
    for row in found:
        assert f"| `{row.key}` |" in page, row.key
        assert row.unit, f"{row.key} states no unit"
    assert "| `fl.rounds` | `int` | `" in page and "≥ 1" in page.split("| `fl.rounds` |")[1].splitlines()[0]


def test_every_metric_and_plugin_is_in_the_reference(site: Path) -> None:
    from leakbed.attacks import registry as attacks
    from leakbed.core.telemetry import metric_names
    from leakbed.defenses import registry as defenses

    metrics = _page("metrics.md")
    for name in metric_names():
        base = name.removesuffix("_total")
        assert f"`{name}`" in metrics or f"`{base}`" in metrics, name
    from leakbed.reference.catalog_page import builtin

    catalog = _page("catalog.md")
    own = builtin(attacks.GROUP)
    assert len(own) >= 15 and set(own) <= set(attacks.names())
    for name in own:
        section = catalog.split(f"### `{name}`", 1)[1].split("### ", 1)[0]
        assert "(none declared)" not in section, f"attack {name} declares no source or threat model"
    for name in builtin(defenses.GROUP):
        assert f"### `{name}`" in catalog, name
    for name in set(attacks.names()) - set(own):  # a plugin installed here: not on the committed page
        assert f"### `{name}`" not in catalog, name
    commands = _page("cli.md")
    for command in ("run", "validate", "sweep", "sandbox-run", "deploy-local", "compose", "attack-worker"):
        assert f"## `leakbed {command}`" in commands, command


def test_the_generated_pages_point_only_at_pages_that_exist(site: Path) -> None:
    from leakbed.reference.pages import PAGES

    for name in PAGES:
        text = _page(name)
        assert "README's" not in text, f"{name} names a README section instead of linking a page"
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" not in target:  # another generated page, or a page of docs/
                assert target in PAGES or (DOCS / "reference" / target).resolve().is_file(), f"{name} links {target}"
    catalog = (site / "reference" / "catalog" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../tutorials/attack-plugin/"' in catalog and 'href="../../tutorials/defense-plugin/"' in catalog


def test_the_plugin_api_page_documents_every_name_kind_and_truth_field(site: Path) -> None:
    import leakbed.plugin as plugin
    from leakbed.attacks.scoring import ScoreContext
    from leakbed.core.declaration import Needs, Scoring
    from leakbed.core.inputs import InputsView
    from leakbed.referee.kinds import KINDS
    from leakbed.reference.plugin_api_page import TRUTH_FIELDS, kind_outputs

    assert (site / "reference" / "plugin-api" / "index.html").stat().st_size > 20_000
    page = _page("plugin-api.md")
    for name in plugin.__all__:
        assert f"#### `{name}`" in page, name
    for model in (Needs, Scoring):
        for field, info in model.model_fields.items():
            rows = [line for line in page.splitlines() if line.startswith(f"| `{field}` |")]
            assert any((info.description or "")[:30] in row for row in rows), (model.__name__, field)
    for field in (*plugin.AttackContext.__dataclass_fields__, *ScoreContext.__dataclass_fields__):
        assert f"| `{field}` |" in page, field
    for method in ("read_global", "read_anon", "read_anon_full", "read_shadow", "read_config", "global_rounds"):
        doc = getattr(InputsView, method).__doc__.replace("``", "`")
        assert f"- `{method}(self" in page and " ".join(doc.split()[:4]) in page, method
    for kind in KINDS:
        section = page.split(f"### Kind `{kind}`", 1)[1].split("\n### ", 1)[0]
        for array, dtype, shape, _ in kind_outputs(kind):
            assert f"| `{array}` | {dtype} | `{shape}` |" in section, (kind, array)
    reid = page.split("### Kind `reid`", 1)[1].split("\n### ", 1)[0]
    assert all(f"| `{a}` |" in reid for a in ("ids", "classes", "scores", "rounds")) and "`(n, k)`" in reid
    # every truth field the page names is one the code seals: the server (owner, round, node) or a device (client/)
    sealed = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "leakbed" / "client").glob("*.py"))
    sealed += (REPO / "leakbed" / "server" / "shuffler.py").read_text(encoding="utf-8")
    sealed += (REPO / "leakbed" / "referee" / "seal.py").read_text()
    for field, _, _ in TRUTH_FIELDS:
        literal = field.split("<", 1)[0]
        assert f'"{literal}' in sealed or f'"{field.replace("_", "-")}"' in sealed, f"no code seals {field!r}"
    assert 'truth=("user_id", "round")' in page  # the legacy "module:function" form, and what it maps to
    assert "score_reconstruction" not in plugin.__all__


def test_the_plugin_api_example_rebuilds_a_devices_local_model(tmp_path: Path) -> None:
    """The page's example, run as written against a small store: each model it builds is the one the device sent."""
    import numpy as np
    import torch

    from leakbed.core.config import ModelConfig
    from leakbed.core.store import UpdateStore
    from leakbed.plugin import AttackContext, AttackerKnowledge, Corpus, InputsView, build_model
    from leakbed.reference.plugin_api_page import EXAMPLE

    assert f"```python\n{EXAMPLE}```" in _page("plugin-api.md")
    assert len(EXAMPLE.strip().splitlines()) <= 13
    corpus = Corpus("tiny", "multiclass", 3, (1, 8, 8), {})
    knowledge = AttackerKnowledge({}, corpus, ModelConfig(), ["fc2.weight"], seed=0)
    torch.manual_seed(0)
    glob = {k: v.numpy().copy() for k, v in build_model(knowledge.model, corpus).state_dict().items()}
    rng = np.random.default_rng(0)
    local = {uid: {k: (v + rng.normal(scale=0.1, size=v.shape)).astype(v.dtype) for k, v in glob.items()} for uid in ("a1", "b2")}
    store = UpdateStore(tmp_path / "inputs")
    store.write_global(3, glob)
    store.write_global(4, {k: v + 1 for k, v in glob.items()})  # the next round's model: not the one to subtract from
    ids = list(local)
    store.write_anon(3, "b", ids, np.zeros((2, 4), np.float32), np.full(2, 10))
    store.write_anon_full(3, "b", ids, [{k: glob[k] - local[u][k] for k in glob} for u in ids])  # Δw = w_global - w_local
    ctx = AttackContext("example", InputsView(store.root), knowledge, params=None, folder=tmp_path / "out")
    namespace: dict = {}
    exec(compile(EXAMPLE, "plugin-api.md example", "exec"), namespace)  # the page's own code
    models = namespace["local_models"](ctx, 3)
    assert set(models) == set(ids)
    for uid, model in models.items():
        state = model.state_dict()
        assert set(state) == set(glob)
        for k, v in state.items():
            np.testing.assert_allclose(v.numpy(), local[uid][k], atol=1e-5, err_msg=f"{uid} {k}")


# Settings that moved to [workers] (core.config.MOVED) and the old legacy logs folder: the hand-written pages name the
# new keys only (the configuration reference lists the moves, generated from MOVED).
REMOVED = ("attack.workers", "attack.sandbox", "attack.worker_addresses", "attack.limits", "attack.tls_",
           "attack.retry_seconds", "attack.queue_size", "attack.submit_timeout", "attack-worker-logs")


def test_the_hand_written_pages_name_no_moved_or_removed_setting() -> None:
    pages = [*DOCS.rglob("*.md"), REPO / "README.md", *(REPO / "examples").rglob("README.md")]
    for path in pages:
        if path.is_relative_to(DOCS / "reference"):
            continue  # the generated pages (the moved keys are listed there, generated from MOVED)
        text = path.read_text(encoding="utf-8")
        for old in REMOVED:
            assert old not in text, f"{path.relative_to(REPO)} names {old}"
        assert not re.search(r'scorer = "[\w.]+:\w+"', text), f"{path.relative_to(REPO)} shows the legacy scorer form"
    for page in (DOCS / "tutorials").glob("*.md"):
        assert "score_reconstruction" not in page.read_text(encoding="utf-8"), page.name  # no longer exported
    moved = _page("config.md").split("## Keys that moved", 1)[1]
    assert "| `attack.workers` | `workers.count` |" in moved and "| `attack.sandbox` | `workers.sandbox` |" in moved


def test_the_architecture_page_states_the_import_table_the_architecture_test_enforces() -> None:
    from tests.test_architecture import ALLOWED, ATTACK_IMPORTERS

    text = (DOCS / "explanation" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Who may import whom", 1)[1]
    stated = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`") and cells[0].endswith("/`"):
            stated[cells[0].strip("`/")] = {w for w in re.findall(r"`(\w+)`", cells[1])}
    assert stated == ALLOWED, stated
    for path in ATTACK_IMPORTERS:
        assert f"`{path}`" in table, path
