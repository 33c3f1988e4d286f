"""Attack plugins as trusted code knows them: declarations from a sandboxed introspection, cached per distribution.

Trusted processes never import an attack module. To learn what an attack declares, a sandbox like a lane's (no
store, no network, ``workers.inside.introspect``) imports it and writes its declaration as JSON to a pipe; this side
reads at most ``MAX_JSON`` bytes before a deadline and checks each declaration with leakbed's own model
(``core.declaration.Declaration``). Declarations are cached per installed distribution: its name, version and a
hash of its content (its files as installed, and the source folders of a development install), together with
leakbed's own attack-side code, which every declaration passes through. A changed plugin is introspected again.
Where no sandbox can start (``workers.sandbox = 'off'``, or 'auto' without bubblewrap) the introspection still runs
in a process of its own, never in the trusted one; with remote attack workers it runs on their hosts.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from importlib.metadata import Distribution, EntryPoint, entry_points
from pathlib import Path

from pydantic import ValidationError

from leakbed.core.config import WorkersConfig
from leakbed.core.declaration import Declaration
from leakbed.core.entry_points import PluginError, package_dirs
from leakbed.workers.hostile import HostileData, load_json, words
from leakbed.workers.one_shot import NoAnswer, call_inside
from leakbed.workers.sandbox import Limits, code_paths

GROUP = "leakbed.attacks"
MAX_JSON = 4 << 20  # bytes: the declarations of one distribution
DEADLINE = 300.0  # [s] importing a distribution's attacks (torch, sklearn...) on a loaded machine
CACHE_VERSION = "1"


def published() -> dict[str, EntryPoint]:
    """Every attack published under ``leakbed.attacks`` by name (nothing is imported)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found and found[ep.name].value != ep.value:
            raise PluginError(f"attack {ep.name!r} is published twice: {found[ep.name].value}, {ep.value}")
        found[ep.name] = ep
    return found


def unknown(name: str, known: Iterable[str]) -> PluginError:
    """An unknown attack, with the closest published name."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return PluginError(f"unknown attack {name!r}{hint} (known: {', '.join(known)})")


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return Path(os.environ.get("LEAKBED_CACHE") or os.path.join(xdg, "leakbed")) / "declarations"


def _hash_files(h: hashlib._Hash, paths: Iterable[Path]) -> None:
    """Hash every file under ``paths`` (sorted; links are not followed: a link's target path is hashed instead)."""
    for top in sorted(set(paths)):
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for f in files:
            h.update(str(f).encode() + b"\0")
            h.update(os.readlink(f).encode() if f.is_symlink() else f.read_bytes())


def content_key(dist: Distribution | None, group_eps: list[EntryPoint]) -> str:
    """A distribution's cache key: name, version, its installed files' record, its source folders' contents (a
    development install), and leakbed's attack-side code."""
    h = hashlib.sha256(CACHE_VERSION.encode())
    if dist is not None:
        h.update(f"{dist.name}\0{dist.version}\0".encode())
        record = dist.read_text("RECORD") or ""
        h.update(record.encode())
    h.update(json.dumps(sorted((ep.name, ep.value) for ep in group_eps)).encode())
    tops = {ep.value.split(":")[0].split(".")[0] for ep in group_eps}
    _hash_files(h, [*package_dirs_of(tops), *code_paths()])
    return h.hexdigest()[:32]


def package_dirs_of(modules: set[str]) -> list[Path]:
    """Where the top-level modules live (found without importing them)."""
    dirs = [p for p in package_dirs(GROUP) if p.name in modules or p.stem in modules]
    return [p for p in dirs if p.exists()]


class Introspector:
    """Declarations of attacks by name, through a sandbox on this host (``limits``; None: a plain subprocess) or a
    remote attack worker (``remote``: a ``workers.hosts.RemoteHost``)."""

    def __init__(self, limits: Limits | None, remote: object | None = None, cache: Path | None = None) -> None:
        self.limits = limits
        self.remote = remote
        self.cache = cache or cache_dir()
        self.seconds = 0.0  # spent introspecting (cache misses)
        self.misses = 0

    def declarations(self, names: Iterable[str]) -> dict[str, Declaration]:
        """Each named attack's declaration; PluginError (one line) for an unknown one or one that fails to load."""
        names = list(dict.fromkeys(names))
        eps = published()
        for name in names:
            if name not in eps:
                raise unknown(name, eps)
        by_dist: dict[str, list[str]] = {}
        for name in names:
            by_dist.setdefault(_dist_name(eps[name]), []).append(name)
        out: dict[str, Declaration] = {}
        for dist_name, wanted in by_dist.items():
            out |= self._distribution(dist_name, wanted, eps)
        return {n: out[n] for n in names}

    def _distribution(self, dist_name: str, wanted: list[str], eps: dict[str, EntryPoint]) -> dict[str, Declaration]:
        members = sorted(n for n, ep in eps.items() if _dist_name(ep) == dist_name)
        dist = eps[wanted[0]].dist
        key = content_key(dist, [eps[n] for n in members])
        path = self.cache / f"{_safe(dist_name)}-{key}.json"
        cached = self._read_cache(path)
        if cached is None or not set(wanted) <= set(cached["declarations"]) | set(cached["errors"]):
            t0 = time.monotonic()
            cached = self._introspect(members)
            self.seconds += time.monotonic() - t0
            self.misses += 1
            self._write_cache(path, cached)
        errors = cached["errors"]
        version = dist.version if dist is not None else ""
        out = {}
        for name in wanted:
            if name in errors:
                raise PluginError(f"attack {name!r} ({eps[name].value}) failed to load: {words(errors[name], 300)}")
            # which distribution published it is this side's knowledge (installed metadata), never the plugin's word
            decl = _checked(name, cached["declarations"].get(name))
            out[name] = decl.model_copy(update={"distribution": dist_name, "version": version})
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
        errors = {str(k): words(str(v), 500) for k, v in doc["errors"].items() if k in names}
        decls = {}
        for name in names:
            if name in errors:
                continue
            try:
                decls[name] = _checked(name, doc["declarations"][name]).model_dump(mode="json")
            except PluginError as err:
                errors[name] = str(err)
        return {"declarations": decls, "errors": errors}

    def _run(self, names: list[str]) -> bytes:
        """The introspection in a sandbox (or, without one, a process of its own): its JSON, bounded, by a deadline."""
        try:
            answer = call_inside("leakbed.workers.inside.introspect", names, what="the introspection", limits=self.limits,
                                 deadline=DEADLINE, max_bytes=MAX_JSON)
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
        raise PluginError(f"attack {name!r} declares itself wrongly: {where}: {words(first['msg'], 200)}") from None
    if decl.name != name:
        raise PluginError(f"attack {name!r} declares the name {decl.name!r}")
    return decl


def _dist_name(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "?"


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
    return Introspector(limits_for(workers)[0])
