"""Plugins by name: the objects published under a Python entry-point group, found the same way for built-in and
third-party packages. Core knows the groups' mechanics only; what a plugin must be is its registry's business
(``attacks.registry``, ``defenses.registry``).

A name selects a plugin; ``distribution:name`` selects the one a given distribution publishes. Two distributions
publishing one name are refused only when that name is selected bare (naming both, and how to select either):
another package cannot stop runs that do not use the name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points

from pydantic import BaseModel

from leakbed.core.errors import LeakbedError
from leakbed.core.plugin_text import plugin_text, quoted_name


class PluginError(LeakbedError, ValueError):
    """A plugin that cannot be found or loaded, or declares itself wrongly (one line)."""


def normalized(name: str) -> str:
    """A distribution's name as packaging compares it (PEP 503): ``Leakbed_Hostile`` -> ``leakbed-hostile``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of(ep: EntryPoint) -> str:
    """The (normalized) name of the distribution that publishes ``ep`` ('?' when its metadata is gone)."""
    return normalized(ep.dist.metadata["Name"] or "?") if ep.dist is not None else "?"


def split(selector: str) -> tuple[str, str]:
    """``distribution:name`` -> (distribution, name); a bare name -> ('', name)."""
    dist, _, name = selector.rpartition(":")
    return normalized(dist), name


def published(group: str) -> list[str]:
    """Every name published under ``group`` (nothing is imported)."""
    return sorted({ep.name for ep in entry_points(group=group)})


def candidates(group: str, selector: str, eps: Sequence[EntryPoint] | None = None) -> list[EntryPoint]:
    """The entry points ``selector`` may mean: every publication of its name (by its distribution when qualified), a
    distribution found twice on ``sys.path`` counted once; ``eps``: the group's entry points, when already read."""
    dist, name = split(selector)
    found: dict[tuple[str, str], EntryPoint] = {}
    for ep in entry_points(group=group) if eps is None else eps:
        if ep.name == name and (not dist or distribution_of(ep) == dist):
            found.setdefault((distribution_of(ep), ep.value), ep)
    return [found[k] for k in sorted(found)]


def select(group: str, selector: str, kind: str, eps: Sequence[EntryPoint] | None = None) -> EntryPoint:
    """The one entry point ``selector`` names; PluginError (one line) when none does, or when a bare name is published
    by several distributions (naming each, and how to select it)."""
    found = candidates(group, selector, eps)
    if not found:
        dist, name = split(selector)
        where = f" by distribution {dist!r}" if dist else ""
        known = ", ".join(plugin_text(n, "json", 60) for n in published(group))
        raise PluginError(f"unknown {kind} {quoted_name(name)}{where}; known: {known}")
    if len(found) > 1:
        name = split(selector)[1]
        each = ", ".join(plugin_text(f"{distribution_of(ep)} ({ep.value})", "json", 200) for ep in found)
        pick = " or ".join(quoted_name(f"{distribution_of(ep)}:{name}", 120) for ep in found)
        times = "twice" if len(found) == 2 else f"{len(found)} times"
        raise PluginError(f"{kind} {quoted_name(name)} is published {times}: by {each}; select one as {pick}")
    return found[0]


def load(group: str, name: str, kind: str) -> object:
    """The object published as ``name`` (or ``distribution:name``) under ``group`` (``kind``: "attack", "defense", for
    the messages)."""
    ep = select(group, name, kind)
    try:
        return ep.load()
    except Exception as err:  # a third-party module that fails to import: name it, in one line
        what, value = plugin_text(f"{type(err).__name__}: {err}", "json", 300), plugin_text(ep.value, "json", 120)
        raise PluginError(f"{kind} {quoted_name(split(name)[1])} ({value}) failed to load: {what}") from None


def load_declared(group: str, name: str, kind: str, base: type) -> type:
    """The class published as ``name`` (or ``distribution:name``), checked to be what its registry expects: a subclass
    of ``base`` (the contract, named ``leakbed.plugin.<base>`` in the message), declaring that name, with a pydantic
    ``params`` model."""
    cls = load(group, name, kind)
    bare = split(name)[1]
    where = plugin_text(f"{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', cls)}", "json", 120)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(f"{kind} {bare!r} ({where}) is not a subclass of leakbed.plugin.{base.__name__}")
    if getattr(cls, "name", None) != bare:
        raise PluginError(f"{kind} {bare!r} ({where}) declares name {quoted_name(getattr(cls, 'name', None))}")
    params = getattr(cls, "params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise PluginError(f"{kind} {bare!r}: params must be a pydantic model (subclass leakbed.plugin.Params)")
    return cls
