"""The reference pages are committed (``docs/reference/``: readable without a docs build) and are the code's own: a
committed page that differs from a fresh generation fails, naming the command that rewrites it. The plugin API page
names every value an attack can read, with its type and unit."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import yaml

from leakbed.reference import readable
from leakbed.reference.pages import PAGES, generate, stale, write
from tests.conftest import REPO

FOLDER = REPO / "docs" / "reference"
COMMAND = ".venv/bin/python scripts/reference_pages.py"


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return generate()


def test_the_committed_pages_are_what_the_code_generates(pages: dict[str, str]) -> None:
    found = stale(FOLDER, pages)
    assert not found, f"docs/reference/{', '.join(found)} differ from what the code generates: run `{COMMAND}` and commit"


def test_a_changed_or_missing_page_is_found_and_rewritten(pages: dict[str, str], tmp_path) -> None:
    for name, text in pages.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert stale(tmp_path, pages) == []
    (tmp_path / "cli.md").write_text(pages["cli.md"] + "edited\n", encoding="utf-8")
    (tmp_path / "imports.md").unlink()
    assert stale(tmp_path, pages) == ["cli.md", "imports.md"]
    assert sorted(p.name for p in write(tmp_path)) == ["cli.md", "imports.md"]
    assert (tmp_path / "cli.md").read_text(encoding="utf-8") == pages["cli.md"]


def test_the_check_command_names_a_stale_page_and_exits_1(tmp_path, monkeypatch) -> None:
    """``scripts/reference_pages.py --check`` in a copy of the pages with one edited: exit 1, the page and the command."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import reference_pages
    finally:
        sys.path.remove(str(REPO / "scripts"))
    for name in PAGES:
        (tmp_path / name).write_text((FOLDER / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "metrics.md").write_text("# old\n", encoding="utf-8")
    monkeypatch.setattr(reference_pages, "FOLDER", tmp_path)
    assert reference_pages.main(["--check"]) == 1
    assert (tmp_path / "metrics.md").read_text(encoding="utf-8") == "# old\n"  # --check writes nothing


def test_the_docs_nav_and_the_readme_link_every_committed_page() -> None:
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    reference = next(entry["Reference"] for entry in nav if "Reference" in entry)
    assert sorted(p for entry in reference for p in entry.values()) == sorted(f"reference/{n}" for n in PAGES)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in PAGES:
        assert f"(docs/reference/{name})" in readme, name
    assert not (REPO / "docs" / "hooks").exists()  # the build adds no page: it reads the committed ones


def test_every_key_of_the_rounds_training_config_is_on_the_plugin_api_page(pages: dict[str, str]) -> None:
    from leakbed.core.config import FLConfig
    from leakbed.core.training import TrainConfig

    page = pages["plugin-api.md"]
    section = page.split("## Every value an attack can read", 1)[1].split("\n## ", 1)[0]
    for key in (*TrainConfig.KEYS, *readable.SERVER_ADDS):
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{key}` |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1].startswith("`") and cells[2], (key, cells)  # a type and a unit
    # the table says which [fl] field each key is made from: TrainConfig.of agrees (every field a distinct value)
    fl = FLConfig(local_epochs=3, batch_size=7, lr=0.0123, optimizer="adam", momentum=0.456, local_steps=5)
    sent = TrainConfig.of(fl).to_config()
    assert sent == {key: getattr(fl, field) for key, field in readable.TRAIN_FROM.items()}
    tap = (REPO / "leakbed" / "server" / "tap.py").read_text(encoding="utf-8")  # what the server adds, by those names
    assert '"participants": len(messages)' in tap and 'train["sampled"]' in tap


def test_the_store_and_knowledge_tables_are_the_codes_keys(pages: dict[str, str], tmp_path) -> None:
    from leakbed.core.data.corpus import Corpus, UserData
    from leakbed.core.knowledge import AttackerKnowledge
    from leakbed.core.store import UpdateStore

    store = UpdateStore(tmp_path)
    store.write_anon(1, "b", ["a", "b"], np.zeros((2, 3), np.float32), np.array([4, 5]), meta={"norm": [1.0, 2.0]})
    documented = {call: {key for c, key, *_ in readable.STORE if c == call} for call, *_ in readable.STORE}
    assert documented["read_anon()"] == set(store.read_anon())
    assert documented["read_anon_meta()"] == set(store.read_anon_meta())
    assert len(documented["read_shadow()"]) == len(store.read_shadow())
    page = pages["plugin-api.md"]
    for cls, path in ((AttackerKnowledge, "ctx.knowledge"), (Corpus, "ctx.knowledge.corpus_meta"),
                      (UserData, "ctx.knowledge.prior[user]")):  # fmt: skip
        for f in dataclasses.fields(cls):
            assert f"| `{path}.{f.name}` | `" in page, (cls.__name__, f.name)


def test_a_key_the_code_has_but_the_page_does_not_refuses_generation(monkeypatch) -> None:
    monkeypatch.setattr(readable, "TRAIN_FROM", {k: v for k, v in readable.TRAIN_FROM.items() if k != "steps"})
    with pytest.raises(readable.Incomplete, match="TrainConfig.KEYS"):
        readable.section()
    monkeypatch.undo()
    monkeypatch.delitem(readable.KNOWLEDGE, "AttackerKnowledge.seed")
    with pytest.raises(readable.Incomplete, match="AttackerKnowledge.seed is not documented"):
        readable.section()


@pytest.mark.long
def test_the_regeneration_command_runs_as_documented(tmp_path) -> None:
    """``--check`` from the checkout's root exits 0 when the pages are current (the command the failure message names)."""
    done = subprocess.run([sys.executable, "scripts/reference_pages.py", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    current = not stale(FOLDER)
    assert done.returncode == (0 if current else 1), done.stderr
