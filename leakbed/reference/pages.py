"""The generated reference pages, committed under ``docs/reference/`` so they can be read without building the docs
(on the repository's web view, in a checkout); the docs build uses the committed files. A test fails when a committed
page differs from what the code generates; ``scripts/reference_pages.py`` rewrites them."""

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
    """Every generated page's markdown, by its file name under ``docs/reference/``."""
    return {name: make() for name, make in PAGES.items()}


def stale(folder: Path, pages: dict[str, str] | None = None) -> list[str]:
    """The pages whose file in ``folder`` is missing or differs from ``pages`` (default: a fresh generation)."""
    pages = generate() if pages is None else pages
    return [name for name, text in pages.items() if not (folder / name).is_file()
            or (folder / name).read_text(encoding="utf-8") != text]  # fmt: skip


def write(folder: Path) -> list[Path]:
    """Every generated page into ``folder``; a page is rewritten only when its text changed. Returns those rewritten."""
    folder.mkdir(parents=True, exist_ok=True)
    pages = generate()
    written = []
    for name in stale(folder, pages):
        path = folder / name
        path.write_text(pages[name], encoding="utf-8")
        written.append(path)
    return written
