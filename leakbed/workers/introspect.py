"""Attack plugins as trusted code knows them: declarations from a sandboxed introspection, cached per distribution.

Trusted processes never import an attack module. To learn what an attack declares, a sandbox like a lane's (no
store, no network, ``workers.inside.introspect``) imports it from its distribution's staged copy
(``workers.staging``) and writes its declaration as JSON to a pipe; this side reads at most ``MAX_JSON`` bytes
before a deadline and checks each declaration with leakbed's own model (``core.declaration.Declaration``). An entry
point whose module is not among its distribution's own files (a module of another distribution, or a link the
staging left out) is refused before anything is imported. Declarations are cached per installed distribution: its
name, version and the hash of its staged files, together with leakbed's own staged attack side, which every
declaration passes through. A changed plugin is introspected again. Where no sandbox can start, a third-party
plugin is refused (``workers.sandbox = 'off'`` runs it unconfined, and the report says so) and leakbed's own
attacks are introspected in a process of their own, never in the trusted one; with remote attack workers it runs
on their hosts.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from pydantic import ValidationError

from leakbed.core.config import WorkersConfig
from leakbed.core.declaration import Declaration
from leakbed.core.entry_points import PluginError, candidates, distribution_of, select, split
from leakbed.core.plugin_text import plugin_text, quoted_name
from leakbed.workers.hostile import HostileData, load_json
from leakbed.workers.one_shot import NoAnswer, call_inside
from leakbed.workers.sandbox import Limits
from leakbed.workers.staging import BUILTIN, Staged, StagingError, cache_root, stage, stage_leakbed

GROUP = "leakbed.attacks"
MAX_JSON = 4 << 20  # bytes: the declarations of one distribution
DEADLINE = 300.0  # [s] importing a distribution's attacks (torch, sklearn...) on a loaded machine
CACHE_VERSION = "2"
INSTALL = ("install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
           "or set workers.sandbox = \"off\" to run it unconfined (the report then says so)")  # fmt: skip


def published() -> dict[str, EntryPoint]:
    """Every attack published under ``leakbed.attacks`` by name; a name several distributions publish appears once
    per distribution, as ``distribution:name`` (nothing is imported)."""
    by_name: dict[str, dict[str, EntryPoint]] = {}
    for ep in entry_points(group=GROUP):
        by_name.setdefault(ep.name, {}).setdefault(distribution_of(ep), ep)
    found: dict[str, EntryPoint] = {}
    for name, eps in by_name.items():
        if len(eps) == 1:
            found[name] = next(iter(eps.values()))
        else:
            found.update({f"{dist}:{name}": ep for dist, ep in eps.items()})
    return found


def unknown(name: str, known: Iterable[str]) -> PluginError:
    """An unknown attack, with the closest published name."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {quoted_name(close[0])}?" if close else ""
    names = ", ".join(plugin_text(k, "json", 60) for k in known)  # published names: any plugin's
    return PluginError(f"unknown attack {quoted_name(name)}{hint} (known: {names})")


def cache_dir() -> Path:
    return cache_root() / "declarations"


def staged_code(ep: EntryPoint) -> Staged:
    """The staged copy of the distribution publishing ``ep`` (leakbed's own attack side for a built-in)."""
    try:
        return stage_leakbed() if distribution_of(ep) == BUILTIN else stage(ep.dist)  # type: ignore[arg-type]
    except StagingError as err:
        raise PluginError(f"attack {quoted_name(ep.name)} ({plugin_text(ep.value, 'json', 120)}): {err}") from None


def foreign_module(ep: EntryPoint, staged: Staged) -> str:
    """Why ``ep`` cannot be loaded from its distribution's staged files ('' when it can)."""
    module = ep.value.split(":")[0].strip()
    if staged.provides(module):
        return ""
    path = module.replace(".", "/")
    left = [s for s in staged.skipped if s.startswith((f"{path}.", f"{path}/", f"{path}:"))]
    why = f" ({left[0]})" if left else ""
    return f"its module {module!r} is not among the files of distribution {staged.name!r}{why}"


def content_key(staged: Staged, group_eps: list[EntryPoint], leakbed: Staged | None = None) -> str:
    """A distribution's cache key: its staged copy's key (name, version, the hash of its files), its entry points, and
    leakbed's own staged attack side."""
    h = hashlib.sha256(CACHE_VERSION.encode())
    h.update(f"{staged.name}\0{staged.version}\0{staged.key}\0".encode())
    h.update(json.dumps(sorted((ep.name, ep.value) for ep in group_eps)).encode())
    h.update((leakbed or stage_leakbed()).key.encode())
    return h.hexdigest()[:32]


class Introspector:
    """Declarations of attacks by name, through a sandbox on this host (``limits``; None: a plain subprocess) or a
    remote attack worker (``remote``: a ``workers.hosts.RemoteHost``). ``unconfined``: why no sandbox can start here
    where the run wanted one (``workers.sandbox = 'auto'``): a third-party attack is then refused, in one line."""

    def __init__(self, limits: Limits | None, remote: object | None = None, cache: Path | None = None,
                 unconfined: str = "") -> None:  # fmt: skip
        self.limits = limits
        self.remote = remote
        self.cache = cache or cache_dir()
        self.unconfined = unconfined
        self.seconds = 0.0  # spent introspecting (cache misses)
        self.misses = 0

    def declarations(self, names: Iterable[str]) -> dict[str, Declaration]:
        """Each named attack's declaration (a name, or ``distribution:name``); PluginError (one line) for an unknown
        one, a name several distributions publish, one that fails to load or whose module is not its own."""
        names = list(dict.fromkeys(names))
        eps = list(entry_points(group=GROUP))  # read once: every lookup below is over this list
        chosen: dict[str, EntryPoint] = {}
        for name in names:
            if not candidates(GROUP, name, eps):
                dist, bare = split(name)
                if dist:
                    raise PluginError(f"unknown attack {bare!r} by distribution {dist!r}")
                raise unknown(bare, {ep.name for ep in eps})
            chosen[name] = select(GROUP, name, "attack", eps)
        for name, ep in chosen.items():
            if self.unconfined and distribution_of(ep) != BUILTIN:
                dist = quoted_name(distribution_of(ep))
                raise PluginError(f"attack {split(name)[1]!r} comes from the third-party distribution {dist} "
                                  f"and no sandbox can start here ({self.unconfined}): {INSTALL}")
        by_dist: dict[str, list[str]] = {}
        for name in names:
            by_dist.setdefault(distribution_of(chosen[name]), []).append(name)
        out: dict[str, Declaration] = {}
        for dist_name, wanted in by_dist.items():
            out |= self._distribution(dist_name, {n: chosen[n] for n in wanted}, eps)
        return {n: out[n] for n in names}

    def _distribution(self, dist_name: str, wanted: dict[str, EntryPoint], eps: list[EntryPoint]) -> dict[str, Declaration]:
        """The declarations of ``wanted`` (selector -> entry point), all published by ``dist_name``: its members are
        introspected together, each by the name that selects it inside (``distribution:name`` where the bare name is
        not unique), and cached together."""
        first = next(iter(wanted.values()))
        members = {ep.name: ep for ep in eps if distribution_of(ep) == dist_name}
        staged = staged_code(first)
        refused = {n: why for n, ep in members.items() if (why := foreign_module(ep, staged))}
        inside = {n: n if len(candidates(GROUP, n, eps)) == 1 else f"{dist_name}:{n}" for n in sorted(members)}
        key = content_key(staged, list(members.values()))
        path = self.cache / f"{_safe(dist_name)}-{key}.json"
        cached = self._read_cache(path)
        bare = {split(sel)[1] for sel in wanted}
        todo = [inside[n] for n in sorted(members) if n not in refused]
        if todo and (cached is None or not bare - set(refused) <= set(cached["declarations"]) | set(cached["errors"])):
            t0 = time.monotonic()
            cached = self._introspect(todo)
            self.seconds += time.monotonic() - t0
            self.misses += 1
            self._write_cache(path, cached)
        cached = cached or {"declarations": {}, "errors": {}}
        errors = cached["errors"]
        version = first.dist.version if first.dist is not None else ""
        out = {}
        for selector, ep in wanted.items():
            name, value = ep.name, plugin_text(ep.value, "json", 120)
            if name in refused:
                raise PluginError(f"attack {quoted_name(name)} ({value}) is refused: {refused[name]}")
            if name in errors:
                why = plugin_text(errors[name], "json", 300)
                raise PluginError(f"attack {quoted_name(name)} ({value}) failed to load: {why}")
            # which distribution published it is this side's knowledge (installed metadata), never the plugin's word
            decl = _checked(name, cached["declarations"].get(name))
            out[selector] = decl.model_copy(update={"distribution": dist_name, "version": version})
        return out

    def _introspect(self, names: list[str]) -> dict:
        raw = self.remote.declare(names, DEADLINE) if self.remote is not None else self._run(names)  # type: ignore[attr-defined]
        try:
            doc = load_json(raw, max_bytes=MAX_JSON, max_depth=24)
        except HostileData as err:
            raise PluginError(f"the introspection of {', '.join(names)} returned no declaration: {err}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("declarations"), dict) or not isinstance(doc.get("errors"), dict):
            raise PluginError(f"the introspection of {', '.join(names)} returned no declaration")
        for name in names:
            if name not in doc["declarations"] and name not in doc["errors"]:
                raise PluginError(f"the introspection did not declare {name!r}")
        errors = {split(k)[1]: plugin_text(str(v), "json", 500) for k, v in doc["errors"].items() if k in names}
        decls = {}
        for selector in names:
            name = split(selector)[1]
            if name in errors:
                continue
            try:
                decls[name] = _checked(name, doc["declarations"][selector]).model_dump(mode="json")
            except PluginError as err:
                errors[name] = str(err)
        return {"declarations": decls, "errors": errors}

    def _run(self, names: list[str]) -> bytes:
        """The introspection in a sandbox (or, without one, a process of its own): its JSON, bounded, by a deadline."""
        dists = sorted({distribution_of(select(GROUP, n, "attack")) for n in names})
        try:
            answer = call_inside("leakbed.workers.inside.introspect", names, what="the introspection", limits=self.limits,
                                 deadline=DEADLINE, max_bytes=MAX_JSON, plugins=dists)
        except NoAnswer as err:
            raise PluginError(str(err)) from None
        if answer.code:
            print(f"leakbed: the introspection of {', '.join(names)} ended with code {answer.code}: {answer.last_words}",
                  file=sys.stderr)
        return answer.data

    def _read_cache(self, path: Path) -> dict | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and {"declarations", "errors"} <= set(doc) else None

    def _write_cache(self, path: Path, doc: dict) -> None:
        """Keep the declarations for the next run; where the cache cannot be written (a read-only container root) the
        next run introspects again."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as err:
            print(f"leakbed: declarations not cached ({path.parent}: {err.strerror})", file=sys.stderr)


def _checked(name: str, doc: object) -> Declaration:
    try:
        decl = Declaration.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PluginError(f"attack {name!r} declares itself wrongly: {where}: {plugin_text(first['msg'], 'json', 200)}") from None
    if decl.name != name:
        raise PluginError(f"attack {name!r} declares the name {decl.name!r}")
    return decl


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]



def for_workers(workers: WorkersConfig) -> Introspector:
    """Where a run's attack plugins are introspected: a remote attack worker's host when the run has them, else a
    sandbox here (a process of its own where no sandbox can start)."""
    from leakbed.workers.hosts import RemoteHost
    from leakbed.workers.sandbox import limits_for
    from leakbed.workers.tls import tls_files

    if workers.addresses:
        return Introspector(None, RemoteHost(workers.addresses[0], tls_files(workers), 16 << 20))
    limits, why = limits_for(workers)
    return Introspector(limits, unconfined=why if limits is None and workers.sandbox == "auto" else "")
