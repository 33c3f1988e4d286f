"""The files the wheel ships beside the code: the built-in experiment configs and the deployment's files
(compose templates and renderings, Dockerfiles, dashboards, Prometheus config, seccomp profile, certificates
script). They are found through the installed package (``importlib.resources``), never through a checkout,
so every command works from any folder of an environment that has only the wheel.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from leakbed.core.config import ConfigError


def _folder(name: str) -> Path:
    """A data folder of the installed package, as a path (the engine, bash and compose need real files)."""
    return Path(str(files("leakbed").joinpath(name)))


PACKAGE = _folder("")  # the installed package's own folder
CONFIGS = _folder("configs")
DEPLOY = _folder("deploy")


def config_names() -> list[str]:
    """The built-in configs by name (their file names less ``.toml``), sorted."""
    return sorted(p.stem for p in CONFIGS.glob("*.toml"))


def config_file(config: str | Path | None) -> Path | None:
    """The file a command's CONFIG argument names: an existing path as given, else a built-in config by name
    (``quickstart`` or ``quickstart.toml``); ``None`` stays ``None`` (the built-in defaults). A ConfigError (one
    line) when it is neither."""
    if config is None or str(config) == "":
        return None
    path = Path(config)
    if path.exists():
        return path
    name = path.name.removesuffix(".toml")
    builtin = CONFIGS / f"{name}.toml"
    if path.name == str(config) and builtin.is_file():
        return builtin
    raise ConfigError(f"{config}: no such config file, and no built-in config of that name (`leakbed init --list` names them)")
