"""The configuration reference: every option of ``core.config.ExperimentConfig`` from its pydantic fields."""

from __future__ import annotations

from leakbed.core.config import MOVED, ExperimentConfig
from leakbed.core.tables import markdown_table
from leakbed.reference.fields import rows, table

INTRO = """# Configuration

One TOML file (or `--set KEY=VALUE` overrides) describes a run; `leakbed validate CONFIG` prints the
frozen form a run writes into its `config.toml`. Every option below has a default, a unit and a bound;
a value outside them stops the run before anything starts, with one line naming the field (exit 2).

Each attack's parameters live in a table `[attack.params.<name>]`, each defense's beside its `name` in
`[[defenses]]`: they are defined by the plugin, and listed in the [catalog](catalog.md).

*Generated from `leakbed/core/config.py` by `leakbed/reference/config_page.py`.*
"""


def page() -> str:
    sections: dict[str, list] = {}
    for row in rows(ExperimentConfig):
        sections.setdefault(row.key.split(".")[0] if "." in row.key else "run", []).append(row)
    parts = [INTRO]
    for section, found in sections.items():
        parts += [f"## `{section}`" if section != "run" else "## The run", "", table(found), ""]
    parts += [
        "## Keys that moved",
        "",
        "An older config keeps loading: each key below is read under its new name, with a one-line notice naming it "
        "(a key given under both names is refused). `leakbed validate` prints the config with the new names.",
        "",
        markdown_table(["old key", "new key"], [[f"`{a}.{b}`", f"`{c}.{d}`"] for (a, b), (c, d) in MOVED.items()]),
        "",
    ]
    return "\n".join(parts)
