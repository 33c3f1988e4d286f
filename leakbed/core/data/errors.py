"""The one error type every data loader raises for unusable input."""

from __future__ import annotations

from leakbed.core.errors import LeakbedError


class DataError(LeakbedError, ValueError):
    """Input data that cannot become a ``Corpus``; the message is one line naming the file (and row)."""
