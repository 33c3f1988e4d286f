"""The defenses a run can use: every ``Defense`` published under the entry-point group ``leakbed.defenses``.

Built-in and third-party defenses are found the same way, by name, and imported only when a run names
one. ``params_of`` validates an entry's parameters against the defense's own model: together the
models form the union of ``defenses`` entries, told apart by ``name``.
"""

from __future__ import annotations

import difflib
import functools

from leakbed.core.config import DefenseConfig
from leakbed.core.entry_points import PluginError, candidates, load_declared, published
from leakbed.core.plugin_text import plugin_text, quoted_name
from leakbed.defenses.contract import Defense, Params

GROUP = "leakbed.defenses"


def names() -> list[str]:
    """Every published defense's name (nothing is imported)."""
    return published(GROUP)


def unknown(name: str) -> PluginError:
    """An unknown defense, with the closest published name."""
    known = names()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {quoted_name(close[0])}?" if close else ""
    listed = ", ".join(plugin_text(k, "json", 60) for k in known)  # published names: any plugin's
    return PluginError(f"unknown defense {quoted_name(name)}{hint} (known: {listed or 'none'})")


@functools.cache
def defense(name: str) -> Defense:
    """The defense published as ``name`` (an instance: defenses keep no state between calls); PluginError (one line)
    for a name nothing publishes, with the closest one."""
    if not candidates(GROUP, name):  # a name, or distribution:name
        raise unknown(name)
    cls = load_declared(GROUP, name, "defense", Defense)
    taken = sorted(set(cls.params.model_fields) & set(DefenseConfig.model_fields))
    if taken:
        raise PluginError(f"defense {name!r}: parameter {taken[0]!r} would shadow the defenses entry's own key")
    return cls()


def params_of(entry: DefenseConfig) -> Params:
    """A ``defenses`` entry's own parameters, validated by its defense (pydantic's error on bad ones)."""
    return defense(entry.name).params.model_validate(entry.params)
