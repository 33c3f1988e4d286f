"""The catalog of attacks and defenses: every plugin published under ``leakbed.attacks`` and
``leakbed.defenses`` in this environment, with its source, threat model and parameters."""

from __future__ import annotations

from attacks import registry as attacks
from defenses import registry as defenses
from leakbed.reference.fields import rows, table

INTRO = """# Catalog of attacks and defenses

Every attack and defense published in this environment under the entry-point groups `leakbed.attacks`
and `leakbed.defenses` (leakbed's own, and any plugin package installed beside it: see
the README's "Bring your own attack or defense"). Name an attack in `attack.suite` and set its
parameters under `[attack.params.<name>]`; name a defense in `[[defenses]]` with its parameters beside
`name`, `fraction` and `users`.

*Generated from the plugin registry by `leakbed/reference/catalog_page.py`.*
"""


def _entry(kind: str, name: str, cls: type) -> list[str]:
    out = [f"### `{name}`", "", f"- **source:** {cls.source or '(none declared)'}"]
    out.append(f"- **threat model:** {cls.threat or '(none declared)'}")
    if kind == "attack":
        needs = cls.needs
        declared = {k: v for k, v in vars(needs).items() if v not in (None, False, (), "")}
        out.append(f"- **needs:** {', '.join(f'{k} = {v}' for k, v in declared.items()) or 'nothing beyond a run'}")
        out.append(f"- **scored by:** `{cls.scorer}`")
    found = rows(cls.params)
    out += ["", table(found) if found else "No parameters.", ""]
    return out


def page() -> str:
    parts = [INTRO, "## Attacks", ""]
    for name in attacks.names():
        parts += _entry("attack", name, attacks.attack(name))
    parts += ["## Defenses", ""]
    for name in defenses.names():
        parts += _entry("defense", name, type(defenses.defense(name)))
    return "\n".join(parts)
