"""The commands of ``leakbed``, one module per family; ``leakbed.cli`` assembles them into the Typer app."""

import warnings

with warnings.catch_warnings():  # typer 0.20 re-exports two helpers click 8.5 deprecates: not ours to act on
    warnings.filterwarnings("ignore", r"'click\.utils\.get_(binary|text)_stream' is deprecated", DeprecationWarning)
    import typer  # noqa: F401 - imported once here, quietly; the commands import it again from sys.modules
