"""The sandbox red team's own Python environment, and distributions installed into it by hand.

The environment is layered like the red team's (``childenv``): a virtual environment whose path file adds the project
environment's ``site-packages``, with the project's console scripts re-made on its interpreter, so every process of a
run in it sees what is installed in it and nothing else does. Its distributions are written the way pip leaves them
(a ``*.dist-info`` with ``METADATA``, ``entry_points.txt``, ``top_level.txt``, ``RECORD``, ``direct_url.json``; an
editable install's path ``.pth`` or finder), by hand: the links a route needs (to ``/``, to the run folder, a module
file that is a link) then exist only in this test's folders, and no build backend walks them. Everything is readable
by others, so an ordinary user can run in it too (``tests/workers/ordinary.py``).
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "hostile_sandbox" / "leakbed_hostile_sandbox"


@dataclass(frozen=True)
class Env:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site(self) -> Path:
        return Path(subprocess.run([str(self.python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                                   capture_output=True, text=True).stdout.strip())  # fmt: skip


def layered_env(folder: Path) -> Env:
    """A virtual environment layered on the project's (its ``site-packages`` added by a path file)."""
    root = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    env = Env(root)
    lines = [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
    (env.site / "_leakbed_project_env.pth").write_text("\n".join(lines) + "\n")
    here = f"#!{sys.executable}"
    for script in Path(sys.executable).parent.iterdir():
        if script.name.startswith("python") or not script.is_file():
            continue
        with open(script, "rb") as f:
            first = f.readline().decode(errors="replace").rstrip("\n")
        if first == here:
            target = root / "bin" / script.name
            target.write_text(f"#!{env.python}\n" + script.read_text(errors="replace").split("\n", 1)[1])
            target.chmod(0o755)
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return env


def install(site_dir: Path, name: str, *, entry_points: dict[str, str], files: dict[str, str] | None = None,
            editable_src: Path | None = None, top_level: tuple[str, ...] = (), pth: str | None = None,
            finder: dict[str, str] | None = None) -> Path:  # fmt: skip
    """Write distribution ``name`` 0.1 into ``site_dir`` as pip would: ``files`` (path in site-packages -> text) for an
    ordinary install; ``editable_src`` (a path .pth naming it) or ``finder`` (a finder's ``MAPPING``) for an editable
    one; ``pth``: a .pth of its own (its text); ``entry_points``: name -> value under ``leakbed.attacks``."""
    norm = name.replace("-", "_")
    info = site_dir / f"{norm}-0.1.dist-info"
    info.mkdir()
    record = []
    for rel, text in (files or {}).items():
        path = site_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        record.append(rel)
    url = {"url": f"file://{editable_src or site_dir}", "dir_info": {"editable": True} if editable_src or finder else {}}
    if editable_src is not None:
        (site_dir / f"__editable__.{norm}-0.1.pth").write_text(f"{editable_src}\n")
        record.append(f"__editable__.{norm}-0.1.pth")
    if finder is not None:
        finder_py = f"__editable___{norm}_0_1_finder.py"
        (site_dir / finder_py).write_text(f"MAPPING: dict[str, str] = {finder!r}\n\ndef install():\n    pass\n")
        (site_dir / f"__editable__.{norm}-0.1.pth").write_text(f"import __editable___{norm}_0_1_finder; "
                                                                f"__editable___{norm}_0_1_finder.install()\n")  # fmt: skip
        record += [finder_py, f"__editable__.{norm}-0.1.pth"]
    if pth is not None:
        (site_dir / f"{norm}-startup.pth").write_text(pth)
        record.append(f"{norm}-startup.pth")
    published = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    meta = {"METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", "INSTALLER": "handmade\n",
            "entry_points.txt": f"[leakbed.attacks]\n{published}", "top_level.txt": "".join(f"{t}\n" for t in top_level),
            "direct_url.json": json.dumps(url)}  # fmt: skip
    for part, text in meta.items():
        (info / part).write_text(text)
    record += [f"{info.name}/{part}" for part in meta] + [f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))
    return info


def hostile_package() -> dict[str, str]:
    """The hostile package's files, as an ordinary install's ``files``."""
    return {f"leakbed_hostile_sandbox/{p.name}": p.read_text() for p in SOURCE.glob("*.py")}


def editable_source(folder: Path, package: str, modules: dict[str, str]) -> Path:
    """A source folder (``src``) holding ``package`` with ``modules`` (name -> text): what an editable install names."""
    pkg = folder / "src" / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, text in modules.items():
        (pkg / name).write_text(text)
    return folder / "src"


def copy_module(name: str) -> str:
    return (SOURCE / name).read_text()


