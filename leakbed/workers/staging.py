"""The code a sandbox runs, staged by trusted code: copies of a distribution's own files in a tree leakbed owns.

A sandbox never binds a folder that plugin data or the import system resolves: bubblewrap follows links in a bind's
source, so an editable plugin whose source folder holds a link to ``/`` under a module name would mount the host's
root. Trusted code copies instead, and the sandbox mounts the copy read-only at a fixed path (``/leakbed/lib/<name>``):

* which files: a distribution's ``RECORD`` (its installed files, beneath the folder that holds its metadata), or, for
  an editable install (whose ``RECORD`` lists only its ``.pth`` and finder), the folders that its editable finder's
  ``MAPPING`` (read as data: ``ast.literal_eval``) or its path ``.pth`` maps its top-level names to; with its
  ``METADATA`` and ``entry_points.txt``, so the sandbox finds its entry points in the copy; leakbed's own attack
  side (``attacks``, ``core``, ``workers``, ``plugin.py``, ``__init__.py``) the same way;
* how: every path is opened without following a link anywhere on it (``openat2`` RESOLVE_NO_SYMLINKS, beneath the
  folder the distribution maps: RESOLVE_BENEATH); only regular files (``fstat`` on the descriptor) are read, from
  that descriptor; links, devices and FIFOs are left out and named (``Staged.skipped``); ``__pycache__`` is left out;
  at most ``MAX_FILES`` files and ``MAX_BYTES`` bytes;
* refused in one line (``StagingError``): a mapped folder that is, or goes through, a link; one that is not a
  package (no ``__init__.py``); one that is or holds ``/``, the working directory, the home folder, leakbed's cache
  or the Python environment.

Each copy is keyed by distribution name, version and a hash of what was read, written once under leakbed's cache
(``LEAKBED_CACHE``, beside the declarations) and reused; a changed plugin gets a new copy. Where the cache cannot
be written (a read-only container root) the copy goes to a private folder under the temporary directory.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.machinery import EXTENSION_SUFFIXES
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from leakbed.core.errors import LeakbedError
from leakbed.workers.hostile import HostileData, open_beneath

FORMAT = "1"  # of a staged tree: a new format stages everything again
BUILTIN = "leakbed"  # leakbed's own distribution
MAX_FILES = 20_000  # [count] files of one distribution
MAX_BYTES = 256 << 20  # [bytes] of one distribution's files
METADATA = ("METADATA", "entry_points.txt")  # of its dist-info: what finds its entry points in the copy
KEEP_DAYS = 7.0  # [days] a copy not used for that long is removed when its distribution is staged again
ATTACKS = "leakbed.attacks"


class StagingError(LeakbedError, ValueError):
    """A distribution's files cannot be staged (one line)."""


def normalized(name: str) -> str:
    """A distribution's name as the packaging specs compare it (PEP 503): ``My_Plugin.x`` -> ``my-plugin-x``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cache_root() -> Path:
    """leakbed's cache folder (``LEAKBED_CACHE``, else ``$XDG_CACHE_HOME/leakbed``): declarations and staged code."""
    xdg = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return Path(os.environ.get("LEAKBED_CACHE") or os.path.join(xdg, "leakbed"))


def code_root() -> Path:
    """The folder holding the ``leakbed`` package this process runs (from this module's own location: not a path any
    plugin names)."""
    return Path(__file__).resolve().parents[2]


def code_paths() -> list[Path]:
    """leakbed's code a sandbox runs: the attack side (``attacks``, ``core``), the in-sandbox entry points
    (``workers``: its trusted half holds no data either) and the plugin contract a third-party attack imports
    (``leakbed/plugin.py``, with its package's ``__init__``); none of it holds data."""
    pkg = code_root() / "leakbed"
    typed = [pkg / "py.typed"] if (pkg / "py.typed").exists() else []
    return [pkg / "attacks", pkg / "core", pkg / "workers", pkg / "__init__.py", pkg / "plugin.py", *typed]


@dataclass(frozen=True)
class Source:
    """Where some of a distribution's files are on the host (``host``: a folder, or a module file) and where they go in
    the staged tree (``into``); ``files``: the paths beneath ``host`` to take (None: every regular file beneath it)."""

    host: Path
    into: str = ""
    files: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Layout:
    """What trusted code finds of an installed distribution without importing anything of it."""

    name: str  # normalized
    version: str
    editable: bool
    sources: tuple[Source, ...]
    pth: tuple[str, ...] = ()  # the .pth files it ships (paths beneath its site folder)
    pth_code: tuple[str, ...] = ()  # those of them Python runs code from at start (an ``import`` line)
    pth_paths: tuple[str, ...] = ()  # the folders its .pth files add to sys.path
    outside: tuple[str, ...] = ()  # its files outside the environment (editable sources, RECORD paths leaving it)
    problems: tuple[str, ...] = ()  # why some of its files cannot be staged


@dataclass(frozen=True)
class Staged:
    """A distribution's staged copy: ``root`` on the host, mounted read-only at ``/leakbed/lib/<name>``."""

    name: str
    version: str
    key: str
    root: Path
    files: frozenset[str]
    skipped: tuple[str, ...] = ()  # what was left out and why: "path: a link"
    problems: tuple[str, ...] = ()

    def provides(self, module: str) -> bool:
        """Whether ``module`` (dotted) is one of the copied files: a ``.py``, a package's ``__init__.py`` or an
        extension module."""
        base = module.replace(".", "/")
        if f"{base}.py" in self.files or f"{base}/__init__.py" in self.files:
            return True
        return any(f"{base}{suffix}" in self.files for suffix in EXTENSION_SUFFIXES)


@dataclass
class _Read:
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # path in the tree -> (content, mode)
    skipped: list[str] = field(default_factory=list)
    size: int = 0


# --- what a distribution is made of ----------------------------------------------------------------------------------


def _site(dist: Distribution) -> Path:
    """The folder holding its metadata: a ``sys.path`` entry of the environment (resolved: a path the environment
    chose, not the plugin; its files beneath are then opened without following any link)."""
    return Path(os.path.realpath(str(dist.locate_file(""))))


def _editable(dist: Distribution) -> bool:
    try:
        doc = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("dir_info"), dict) and doc["dir_info"].get("editable") is True


def _record(dist: Distribution) -> list[str]:
    return [str(f) for f in dist.files or []]


def _finder_mapping(text: str) -> dict[str, str]:
    """An editable finder's ``MAPPING`` (top-level name -> folder or file), read as a literal: its code never runs."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "MAPPING" and getattr(node, "value", None) is not None:
            try:
                value = ast.literal_eval(node.value)  # type: ignore[arg-type]
            except ValueError:
                return {}
            if isinstance(value, dict):
                return {str(k): str(v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def _pth_lines(text: str) -> tuple[list[str], bool]:
    """A .pth file's path lines and whether it holds code (a line starting with ``import``, which ``site`` runs)."""
    paths, code = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            code = True
        else:
            paths.append(line)
    return paths, code


def _top_names(dist: Distribution, group: str | None = None) -> set[str]:
    """The top-level names it provides: its ``top_level.txt`` and the modules its entry points name."""
    names = {line.strip() for line in (dist.read_text("top_level.txt") or "").splitlines() if line.strip()}
    names.update(ep.value.split(":")[0].split(".")[0].strip() for ep in dist.entry_points if group in (None, ep.group))
    return {n for n in names if n.isidentifier()}


def _inside_env(path: Path) -> bool:
    prefixes = {Path(p).absolute() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return any(path == p or path.is_relative_to(p) for p in prefixes)


def layout(dist: Distribution) -> Layout:
    """The files ``dist`` is made of, found from its metadata as data (nothing of it imported or run)."""
    name, version = normalized(dist.metadata["Name"] or "?"), dist.version or "?"
    site = _site(dist)
    record = _record(dist)
    editable = _editable(dist)
    own, pth, pth_code, pth_paths, outside, problems = [], [], [], [], [], []
    mapping: dict[str, str] = {}
    roots: list[str] = []
    for rel in record:
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts:
            target = Path(os.path.normpath(site / rel))
            if not _inside_env(target):
                outside.append(str(target))
            continue
        if parts and parts[0].endswith((".dist-info", ".egg-info")) or "__pycache__" in parts:
            continue
        if rel.endswith(".pth") and len(parts) == 1:
            pth.append(rel)
            try:
                text = (site / rel).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            paths, code = _pth_lines(text)
            if code:
                pth_code.append(rel)
            resolved = [p if os.path.isabs(p) else str(site / p) for p in paths]
            pth_paths.extend(resolved)
            if editable:
                roots.extend(resolved)
            continue
        if editable and len(parts) == 1 and rel.startswith("__editable__") and rel.endswith("_finder.py"):
            try:
                mapping.update(_finder_mapping((site / rel).read_text(encoding="utf-8", errors="replace")))
            except OSError:
                pass
            continue
        own.append(rel)
    sources: list[Source] = []
    if own:
        sources.append(Source(site, "", tuple(sorted(own))))
    if editable:
        for top in sorted(_top_names(dist)):
            if top in mapping:
                continue
            for root in roots:
                for candidate in (Path(root) / top, Path(root) / f"{top}.py"):
                    if os.path.lexists(candidate):
                        mapping[top] = str(candidate)
                        break
                if top in mapping:
                    break
        for top, where in sorted(mapping.items()):
            path = Path(where)
            if not path.is_absolute():
                problems.append(f"{top!r} is mapped to the relative path {where!r}")
                continue
            outside.append(str(path))
            sources.append(Source(path, top if path.suffix != ".py" else "", None if path.suffix != ".py" else (path.name,)))
    return Layout(name, version, editable, tuple(sources), tuple(pth), tuple(pth_code), tuple(dict.fromkeys(pth_paths)),
                  tuple(dict.fromkeys(outside)), tuple(problems))


def _leakbed_version() -> str:
    dist = _leakbed_dist()
    return dist.version if dist is not None else "0"


def leakbed_layout() -> Layout:
    """leakbed's own attack side, from where this process runs it (``code_paths``)."""
    version = _leakbed_version()
    pkg = code_root() / "leakbed"
    sources = [Source(p, f"leakbed/{p.name}") if p.is_dir() else Source(pkg, "leakbed", (p.name,)) for p in code_paths()]
    return Layout(BUILTIN, version, False, tuple(sources))


# --- reading without following a link --------------------------------------------------------------------------------


def _forbidden(path: Path) -> str:
    """Why a mapped folder must not be copied ('' when it may): it is the root or holds what a sandbox never sees."""
    held = {"the root": Path("/"), "the working directory": Path.cwd(), "the home folder": Path.home(),
            "leakbed's cache": cache_root(), "the Python environment": Path(sys.prefix),
            "the Python install": Path(sys.base_prefix)}  # fmt: skip
    for what, where in held.items():
        where = where.absolute()
        if path == where or where.is_relative_to(path):
            return f"it is or holds {what}"
    return ""


def _open_absolute(path: Path) -> int:
    """A descriptor of ``path``, refused (HostileData) where a link is on its way."""
    root = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rel = str(path).lstrip("/")
        return root if not rel else open_beneath(root, rel)
    finally:
        if rel:
            os.close(root)


def _take(fd: int, rel: str, into: str, got: _Read) -> None:
    """Read the regular file open at ``fd`` (``rel`` on the host) into ``got`` as ``into``; anything else is noted as
    skipped."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        got.skipped.append(f"{into}: not a regular file")
        return
    if len(got.files) >= MAX_FILES:
        raise StagingError(f"more than {MAX_FILES} files")
    got.size += st.st_size
    if got.size > MAX_BYTES:
        raise StagingError(f"more than {MAX_BYTES} bytes of files")
    chunks, left = [], st.st_size + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > st.st_size:
        raise StagingError(f"{rel} grew while being read")
    got.files[into] = (data, 0o555 if st.st_mode & 0o111 else 0o444)


def _walk(dir_fd: int, rel: str, into: str, got: _Read) -> None:
    """Every regular file beneath the folder open at ``dir_fd``, no link followed."""
    with os.scandir(dir_fd) as entries:
        names = sorted((e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in entries)
    for name, link, folder in names:
        if name == "__pycache__":
            continue
        here, there = f"{rel}/{name}", f"{into}/{name}" if into else name
        if link:
            got.skipped.append(f"{there}: a link")
            continue
        try:
            fd = open_beneath(dir_fd, name)
        except HostileData:
            got.skipped.append(f"{there}: a link")
            continue
        except OSError as err:
            got.skipped.append(f"{there}: {err.strerror}")
            continue
        try:
            if folder and stat.S_ISDIR(os.fstat(fd).st_mode):
                _walk(fd, here, there, got)
            else:
                _take(fd, here, there, got)
        finally:
            os.close(fd)


def _read_source(source: Source, got: _Read, mapped: bool) -> None:
    try:
        top = _open_absolute(source.host)
    except HostileData:
        raise StagingError(f"{source.host} is a link or goes through one: leakbed copies only regular files") from None
    except OSError as err:
        raise StagingError(f"{source.host}: {err.strerror}") from None
    try:
        is_dir = stat.S_ISDIR(os.fstat(top).st_mode)
        if source.files is None:
            if not is_dir:
                raise StagingError(f"{source.host} is not a folder")
            if mapped:
                why = _forbidden(source.host)
                if why:
                    raise StagingError(f"{source.host}: {why}")
                if not _has_init(top):
                    raise StagingError(f"{source.host} is not a package (no __init__.py)")
            _walk(top, str(source.host), source.into, got)
            return
        for rel in source.files:
            there = f"{source.into}/{rel}" if source.into else rel
            try:
                fd = open_beneath(top, rel) if is_dir else os.dup(top)
            except HostileData:
                got.skipped.append(f"{there}: a link or through one")
                continue
            except OSError as err:
                got.skipped.append(f"{there}: {err.strerror}")
                continue
            try:
                _take(fd, rel, there, got)
            finally:
                os.close(fd)
    finally:
        if top >= 0:
            os.close(top)


def _has_init(dir_fd: int) -> bool:
    try:
        fd = open_beneath(dir_fd, "__init__.py")
    except (HostileData, OSError):
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def _metadata(dist: Distribution | None, name: str, version: str, got: _Read) -> None:
    """Its ``METADATA`` and ``entry_points.txt`` as the copy's own dist-info (what finds its entry points inside)."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    for part in METADATA:
        text = dist.read_text(part) if dist is not None else None
        if text is not None:
            got.files[f"{info}/{part}"] = (text.encode(), 0o444)


def read(lay: Layout, dist: Distribution | None) -> _Read:
    """The files of ``lay``, read as the staging reads them; StagingError (one line) when they cannot be."""
    got = _Read()
    if lay.problems:
        raise StagingError(f"distribution {lay.name!r}: {lay.problems[0]}")
    try:
        for source in lay.sources:
            _read_source(source, got, mapped=lay.editable and source.files is None)
    except StagingError as err:
        raise StagingError(f"distribution {lay.name!r}: {err}") from None
    _metadata(dist, lay.name, lay.version, got)
    return got


# --- the staged tree -------------------------------------------------------------------------------------------------


def _key(lay: Layout, got: _Read) -> str:
    h = hashlib.sha256(f"{FORMAT}\0{lay.name}\0{lay.version}\0".encode())
    for rel in sorted(got.files):
        data, mode = got.files[rel]
        h.update(f"{rel}\0{mode}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:32]


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:60]


_fallback: Path | None = None


def staging_dir() -> Path:
    """Where staged trees live: ``<cache>/staging``; where that cannot be written, a private temporary folder."""
    global _fallback
    folder = cache_root() / "staging"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
    except OSError:
        pass
    if _fallback is None:
        _fallback = Path(tempfile.mkdtemp(prefix="leakbed-staging-"))
    return _fallback


def _write(folder: Path, got: _Read) -> None:
    folder.mkdir(mode=0o755)
    for rel in sorted(got.files):
        data, mode = got.files[rel]
        path = folder / rel
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
    for d in [folder, *(p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink())]:
        d.chmod(0o755)


def _prune(base: Path, name: str, keep: Path) -> None:
    """Remove this distribution's copies unused for ``KEEP_DAYS`` (a running sandbox uses a copy it touched today)."""
    old = time.time() - KEEP_DAYS * 86400
    for entry in base.glob(f"{_safe(name)}-*"):
        try:
            if entry != keep and entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime < old:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


def stage_read(lay: Layout, got: _Read) -> Staged:
    """Write what was read into its keyed folder, once; an existing copy with the same key is reused."""
    key = _key(lay, got)
    base = staging_dir()
    final = base / f"{_safe(lay.name)}-{_safe(lay.version)}-{key}"
    if not final.is_dir():
        tmp = base / f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
        try:
            _write(tmp, got)
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not final.is_dir():
                raise
        _prune(base, lay.name, final)
    else:
        try:
            os.utime(final)
        except OSError:
            pass
    return Staged(lay.name, lay.version, key, final, frozenset(got.files), tuple(got.skipped), lay.problems)


_staged: dict[tuple, Staged] = {}  # this process's stagings, by what their files looked like (``_fingerprint``)


def _fingerprint(lay: Layout, dist: Distribution | None) -> tuple | None:
    """What ``lay``'s files look like without reading them (each one's path, type, size, mtime and inode; no link
    followed), with its metadata and the folders a mapped one must not hold: a staging done for the same fingerprint
    is reused without reading every file again (a lane starts often). None where it cannot be taken: the full
    staging then decides."""
    parts: list[tuple] = [(os.getcwd(), str(Path.home()), str(cache_root()))]
    parts += [(part, dist.read_text(part) if dist is not None else None) for part in METADATA]
    for source in lay.sources:
        if os.path.realpath(source.host) != str(source.host):  # a link on its way: never walked here
            return None
        try:
            if source.files is None:
                for top, dirs, files in os.walk(source.host, followlinks=False):
                    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                    for name in sorted([*dirs, *files]):
                        st = os.lstat(os.path.join(top, name))
                        parts.append((top, name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino))
            else:
                for rel in source.files:
                    st = os.lstat(source.host / rel)
                    parts.append((str(source.host), rel, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            return None
    return (lay, tuple(parts))


def _stage(lay: Layout, dist: Distribution | None) -> Staged:
    key = _fingerprint(lay, dist)
    done = _staged.get(key) if key is not None else None
    if done is not None and done.root.is_dir():
        return done
    try:
        staged = stage_read(lay, read(lay, dist))
    except OSError as err:  # a folder it may not read, a full disk: one line
        raise StagingError(f"distribution {lay.name!r}: {err.filename or ''}: {err.strerror}") from None
    if key is not None:
        _staged[key] = staged
    return staged


def stage(dist: Distribution) -> Staged:
    """``dist``'s files staged (copied once per content); StagingError (one line) when they cannot be."""
    return _stage(layout(dist), dist)


@functools.cache
def _leakbed_dist() -> Distribution | None:
    try:
        return distribution(BUILTIN)
    except PackageNotFoundError:
        return None


def stage_leakbed() -> Staged:
    """leakbed's own attack side, staged like a plugin's code."""
    return _stage(leakbed_layout(), _leakbed_dist())


def attack_distributions() -> dict[str, Distribution]:
    """Every third-party distribution publishing attacks, by normalized name (leakbed's own aside)."""
    from importlib.metadata import entry_points

    found: dict[str, Distribution] = {}
    for ep in entry_points(group=ATTACKS):
        if ep.dist is not None:
            name = normalized(ep.dist.metadata["Name"] or "?")
            if name != BUILTIN:
                found.setdefault(name, ep.dist)
    return found


def stage_plugins(names: Iterable[str] | None) -> Iterator[Staged]:
    """The staged copies of the third-party attack distributions ``names`` (None: every one that can be staged; a
    named one that cannot is StagingError)."""
    if names is None:
        for dist in attack_distributions().values():
            try:
                yield stage(dist)
            except (StagingError, OSError):
                continue
        return
    for name in dict.fromkeys(normalized(n) for n in names):
        if name == BUILTIN:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise StagingError(f"no distribution {name!r} is installed") from None
        yield stage(dist)
