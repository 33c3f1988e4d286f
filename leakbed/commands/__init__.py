"""The commands of ``leakbed``, one module per family; ``leakbed.cli`` assembles them into the Typer app."""
