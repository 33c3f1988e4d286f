"""The generated reference pages: the docs build's hook (``docs/hooks/reference.py``) adds them to every build
as generated files, so they are never written into (nor committed in) the checkout's ``docs/`` folder."""

from __future__ import annotations

from pathlib import Path

from leakbed.reference import catalog_page, cli_page, config_page, imports_page, metrics_page, plugin_api_page

PAGES = {
    "config.md": config_page.page,
    "cli.md": cli_page.page,
    "metrics.md": metrics_page.page,
    "catalog.md": catalog_page.page,
    "plugin-api.md": plugin_api_page.page,
    "imports.md": imports_page.page,
}


def generate() -> dict[str, str]:
    """Every generated page's markdown, by its file name under the site's ``reference/`` folder."""
    return {name: make() for name, make in PAGES.items()}


def write(folder: Path) -> list[Path]:
    """Every generated page into ``folder`` (to read them outside a docs build; the build itself does not call
    this). A page is rewritten only when its text changed."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generate().items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
