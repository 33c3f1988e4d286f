"""Dropping root to a sandbox's uid: one ``setpriv`` prefix for the sandbox's command and for its guard, so that
neither keeps a group, a capability (inheritable, ambient or in the bounding set) or a way to gain one back."""

from __future__ import annotations

import shutil

__all__ = ["drop"]


def drop(uid: int) -> list[str]:
    """``setpriv ... --``: real, effective and saved uid and gid ``uid``, no supplementary group, no capability,
    no new privileges (a set-uid file or file capabilities give nothing)."""
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
