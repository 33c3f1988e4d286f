"""The one root of the errors leakbed raises on purpose, so the CLI maps them in one place and a plugin author can
raise one (``leakbed.plugin`` exports it).

``LeakbedError`` is bad input: a config, a command-line value, a data set, a plugin or a run folder leakbed refuses
before anything starts. The CLI prints its first line as ``leakbed: error: <message>`` and exits 2. ``Failed`` is the
one kind that is not bad input: something that started and then failed (the simulation, a local deployment); the CLI
prints ``leakbed: <what> failed: <message>`` and exits 1. Both keep their message to one line.

Internal control flow (an interrupt, a lane's deadline, a frame that ended early, hostile outputs the pool records)
does not derive from it: those never reach the user as a refusal. Each room's own classes keep their built-in base
beside this one (``ConfigError(LeakbedError, ValueError)``), so code that catches ``ValueError`` still does.
"""

from __future__ import annotations

from typing import ClassVar


class LeakbedError(Exception):
    """Bad input, refused before anything starts: one line, exit code 2."""

    exit_code: ClassVar[int] = 2


class Failed(LeakbedError):
    """Something that started and failed (not bad input): ``leakbed: <what> failed: <message>``, exit code 1."""

    exit_code: ClassVar[int] = 1
    what: str = "run"  # the line's subject: "leakbed: run failed: ..."

    def __init__(self, message: str = "", what: str | None = None) -> None:
        super().__init__(message)
        if what is not None:
            self.what = what
