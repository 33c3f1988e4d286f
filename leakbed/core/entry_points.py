"""Plugins by name: the objects published under a Python entry-point group, found the same way for built-in and
third-party packages. Core knows the groups' mechanics only; what a plugin must be is its registry's business
(``attacks.registry``, ``defenses.registry``)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

from pydantic import BaseModel


class PluginError(ValueError):
    """A plugin that cannot be found or loaded, or declares itself wrongly (one line)."""


def published(group: str) -> list[str]:
    """Every name published under ``group`` (nothing is imported)."""
    return sorted({ep.name for ep in entry_points(group=group)})


def package_dirs(group: str) -> list[Path]:
    """Where the top-level packages publishing under ``group`` live (found without importing them): what a sandbox
    must mount for a plugin installed in development mode (``pip install -e``) outside the Python install."""
    dirs: set[Path] = set()
    for ep in entry_points(group=group):
        spec = importlib.util.find_spec(ep.value.split(":")[0].split(".")[0])
        if spec is None:
            continue
        dirs.update(Path(p) for p in spec.submodule_search_locations or ([spec.origin] if spec.origin else []))
    return sorted(dirs)


def load(group: str, name: str, kind: str) -> object:
    """The object published as ``name`` under ``group`` (``kind``: "attack", "defense", for the messages)."""
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise PluginError(f"unknown {kind} {name!r}; known: {', '.join(published(group))}")
    if len({ep.value for ep in found}) > 1:
        raise PluginError(f"{kind} {name!r} is published twice: {', '.join(sorted({ep.value for ep in found}))}")
    try:
        return found[0].load()
    except Exception as err:  # a third-party module that fails to import: name it, in one line
        raise PluginError(f"{kind} {name!r} ({found[0].value}) failed to load: {type(err).__name__}: {err}") from None


def load_declared(group: str, name: str, kind: str, base: type) -> type:
    """The class published as ``name``, checked to be what its registry expects: a subclass of ``base`` (the
    contract, named ``leakbed.plugin.<base>`` in the message), declaring that ``name``, with a pydantic ``params``
    model."""
    cls = load(group, name, kind)
    where = f"{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', cls)}"
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(f"{kind} {name!r} ({where}) is not a subclass of leakbed.plugin.{base.__name__}")
    if getattr(cls, "name", None) != name:
        raise PluginError(f"{kind} {name!r} ({where}) declares name {getattr(cls, 'name', None)!r}")
    params = getattr(cls, "params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise PluginError(f"{kind} {name!r}: params must be a pydantic model (subclass leakbed.plugin.Params)")
    return cls
