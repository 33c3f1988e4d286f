"""The catalog of leakbed's own attacks and defenses (published under ``leakbed.attacks`` and ``leakbed.defenses`` by
the ``leakbed`` distribution), with their source, threat model and parameters. Plugins installed beside leakbed are
left out: the page is committed (``docs/reference/catalog.md``) and must not depend on the environment that wrote it.

Attacks are known here as their declarations (a sandboxed introspection: ``workers.introspect``), never by
importing their modules; defenses by their registry (device code, which the docs build may import).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from leakbed.core.config import WorkersConfig
from leakbed.core.declaration import Declaration
from leakbed.core.entry_points import distribution_of
from leakbed.defenses import registry as defenses
from leakbed.reference.fields import param_rows, rows, table
from leakbed.workers.introspect import for_workers

BUILTIN = "leakbed"  # the distribution whose plugins the page lists

INTRO = """# Catalog of attacks and defenses

Every attack and defense leakbed ships, published under the entry-point groups `leakbed.attacks` and
`leakbed.defenses` as any plugin package publishes its own (see [Write an attack plugin](../tutorials/attack-plugin.md),
[Write a defense plugin](../tutorials/defense-plugin.md) and the [plugin API](plugin-api.md), which lists each scorer
kind with the outputs it expects); a plugin installed beside leakbed is named the same way. Name an attack in
`attack.suite` and set its parameters under `[attack.params.<name>]`; name a defense in `[[defenses]]` with its
parameters beside `name`, `fraction` and `users`.

*Generated from the plugins' declarations (learnt in a sandbox) by `leakbed/reference/catalog_page.py`.*
"""


def _attack(decl: Declaration) -> list[str]:
    out = [f"### `{decl.name}`", "", f"- **source:** {decl.source or '(none declared)'}"]
    out.append(f"- **threat model:** {decl.threat or '(none declared)'}")
    skip = (None, False, (), "", "update")
    declared = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in decl.needs if v not in skip}
    out.append(f"- **needs:** {', '.join(f'{k} = {v}' for k, v in declared.items()) or 'nothing beyond a run'}")
    scoring = decl.scoring
    own = f"its own scorer `{scoring.function}`, in the scoring sandbox"
    scored = own if scoring.kind == "plugin" else f"kind `{scoring.kind}`"
    out.append(f"- **scored by:** {scored}")
    if decl.builds_on:
        out.append(f"- **builds on:** {', '.join(decl.builds_on)}")
    out.append(f"- **distribution:** {decl.distribution or '?'} {decl.version}")
    found = param_rows(decl.params.fields)
    out += ["", table(found) if found else "No parameters.", ""]
    return out


def _defense(name: str, cls: type) -> list[str]:
    out = [f"### `{name}`", "", f"- **source:** {cls.source or '(none declared)'}"]
    out.append(f"- **threat model:** {cls.threat or '(none declared)'}")
    found = rows(cls.params)
    out += ["", table(found) if found else "No parameters.", ""]
    return out


def builtin(group: str) -> list[str]:
    """The names the ``leakbed`` distribution publishes under ``group`` (nothing is imported)."""
    return sorted({ep.name for ep in entry_points(group=group) if distribution_of(ep) == BUILTIN})


def page() -> str:
    parts = [INTRO, "## Attacks", ""]
    declarations = for_workers(WorkersConfig()).declarations(builtin("leakbed.attacks"))
    for decl in declarations.values():
        parts += _attack(decl)
    parts += ["## Defenses", ""]
    for name in builtin(defenses.GROUP):
        parts += _defense(name, type(defenses.defense(name)))
    return "\n".join(parts)
