"""Flower's deprecation notices as Python warnings, so that a test suite can turn them into errors.

Flower reports a deprecated API by logging ``DEPRECATED FEATURE: <what>`` (``flwr.supercore.logger.
warn_deprecated_feature``), not through ``warnings``. ``FlowerDeprecationWarning`` carries such a notice:
``AsWarning`` turns those logged in this process into warnings, ``reemit`` those in a run's log (the
Simulation Runtime logs in its own process; ``leakbed.simulate`` reads its stream). leakbed's tests make
the warning an error (``pyproject.toml``, ``filterwarnings``), so no deprecated Flower API stays on a path.
"""

from __future__ import annotations

import logging
import re
import warnings

NOTICE = "DEPRECATED FEATURE: "
_LINE = re.compile(r"DEPRECATED FEATURE: (.*)")


class FlowerDeprecationWarning(DeprecationWarning):
    """Flower logged that leakbed used a deprecated API."""


class AsWarning(logging.Filter):
    """On Flower's logger: each deprecation notice also becomes a ``FlowerDeprecationWarning``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if NOTICE in message:
            warnings.warn(message.split(NOTICE, 1)[1].splitlines()[0], FlowerDeprecationWarning, stacklevel=2)
        return True


def reemit(log_text: str) -> list[str]:
    """Warn once per deprecation notice in a run's log; returns them."""
    found = sorted({m.group(1).strip() for m in _LINE.finditer(log_text)})
    for notice in found:
        warnings.warn(f"in the simulation: {notice}", FlowerDeprecationWarning, stacklevel=2)
    return found
