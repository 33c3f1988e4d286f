"""Write the generated reference pages into the docs tree (the docs build's hook calls it before every build)."""

from __future__ import annotations

from pathlib import Path

from leakbed.reference import catalog_page, cli_page, config_page, imports_page, metrics_page

PAGES = {
    "config.md": config_page.page,
    "cli.md": cli_page.page,
    "metrics.md": metrics_page.page,
    "catalog.md": catalog_page.page,
    "imports.md": imports_page.page,
}


def write(folder: Path) -> list[Path]:
    """Every generated page into ``folder``; a page is rewritten only when its text changed."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PAGES.items():
        path = folder / name
        text = make()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
