"""The catalog of attacks and defenses: every plugin published under ``leakbed.attacks`` and
``leakbed.defenses`` in this environment, with its source, threat model and parameters.

Attacks are known here as their declarations (a sandboxed introspection: ``workers.introspect``), never by
importing their modules; defenses by their registry (device code, which the docs build may import).
"""

from __future__ import annotations

from leakbed.core.config import WorkersConfig
from leakbed.core.declaration import Declaration
from leakbed.defenses import registry as defenses
from leakbed.reference.fields import param_rows, rows, table
from leakbed.workers.introspect import for_workers, published

INTRO = """# Catalog of attacks and defenses

Every attack and defense published in this environment under the entry-point groups `leakbed.attacks`
and `leakbed.defenses` (leakbed's own, and any plugin package installed beside it: see
[Write an attack plugin](../tutorials/attack-plugin.md), [Write a defense plugin](../tutorials/defense-plugin.md)
and the [plugin API](plugin-api.md), which lists each scorer kind with the outputs it expects). Name an
attack in `attack.suite` and set its parameters under `[attack.params.<name>]`; name a defense in
`[[defenses]]` with its parameters beside `name`, `fraction` and `users`.

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


def page() -> str:
    parts = [INTRO, "## Attacks", ""]
    declarations = for_workers(WorkersConfig()).declarations(sorted(published()))
    for decl in declarations.values():
        parts += _attack(decl)
    parts += ["## Defenses", ""]
    for name in defenses.names():
        parts += _defense(name, type(defenses.defense(name)))
    return "\n".join(parts)
