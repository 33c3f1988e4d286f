"""What the CLI shows on the terminal: one-line errors, rich tables and progress bars, and the commands it tells the
user to run, spelled so they work as printed (the console scripts of this Python's environment, not PATH's)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from leakbed.core.plugin_text import plugin_text

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

    from leakbed.line_progress import LineProgress


def fail(message: str) -> int:
    """``leakbed: error: <message>`` (its first line) on stderr; the exit code 2 of bad input. The message may quote a
    plugin (a name, an entry point, its error): it crosses ``core.plugin_text`` for the console, so no escape byte of a
    plugin's reaches the terminal."""
    first = str(message).splitlines()[0] if str(message).strip() else ""
    print(f"leakbed: error: {plugin_text(first, 'console', 2000) or 'bad input'}", file=sys.stderr)
    return 2


def note(message: object) -> None:
    """``leakbed: note: <message>`` (one line, stderr): something the user should know that stops nothing."""
    print(f"leakbed: note: {plugin_text(message, 'console', 2000)}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def notes_in_one_line() -> Iterator[None]:
    """Within it, a warning of leakbed's own (``core.config.ConfigKeyMoved``: an old config key read under its new
    name; a deprecated plugin API name) is one ``note`` line, not Python's warning with its file, line and source
    line; any other warning shows as Python shows it."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: object = None,
             line: str | None = None) -> None:  # fmt: skip
        if category.__module__.split(".")[0] == "leakbed":
            note(message)
        else:
            shown(message, category, filename, lineno, file, line)  # type: ignore[arg-type]

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def say(message: str) -> None:
    """A line for the user beside the command's output (stderr, flushed)."""
    print(message, file=sys.stderr, flush=True)


def rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]], caption: str = "") -> Table:
    """A rich table whose cells are plain text: no rich markup in a name or a plugin's words is interpreted (their
    escape and control bytes are gone already: ``core.plugin_text`` for the console)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, caption=Text(caption) if caption else None, caption_justify="left")
    for h in header:
        table.add_column(Text(h))
    for r in rows:
        table.add_row(*(Text(str(c)) for c in r))
    return table


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]], caption: str = "") -> None:
    """``rich_table`` printed on stdout."""
    from rich.console import Console

    Console().print(rich_table(title, header, rows, caption))


def print_plain(text: str) -> None:
    """A line printed as it is (no markup, no highlighting, not wrapped), beside rich output."""
    from rich.console import Console

    Console().print(text, markup=False, highlight=False, soft_wrap=True)


def progress() -> Progress | LineProgress:
    """The progress bars of a run: description, bar, done / total, elapsed; where rich would draw them only once
    they stop (a file, a pipe, a dumb terminal: rich's own test of its console), the same as plain lines as the run
    goes (``leakbed.line_progress``)."""
    from rich.console import Console

    shown = Console()
    if not (shown.is_interactive or shown.is_jupyter):
        from leakbed.line_progress import LineProgress

        return LineProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=shown)


def attack_progress(title: str, figures: dict[str, float]) -> str:
    """The words of a prior's attack-side progress bar (the bar counts the rounds it analysed): its lag (rounds handed
    to it and not yet analysed), and its fits once they are asked for, done of all and running (``attack_*`` figures:
    ``AttackPool.progress``). Short: the bars share the terminal's width with the FL rounds' bar."""
    words = f"{title} (lag {int(figures.get('attack_lag', 0))}"
    if figures.get("attack_fits"):
        words += f"; fits {int(figures.get('attack_fitted', 0))}/{int(figures['attack_fits'])}"
        running = int(figures.get("attack_fitting", 0))
        words += f", {running} running" if running else ""
    return words + ")"


def shown_path(path: Path | str) -> str:
    """``path`` as the user can type it here: relative to the working directory when it lies inside it (``./x`` for a
    file right there, so a shell runs it rather than searching PATH; ``.`` for the directory itself), absolute
    otherwise."""
    path = Path(os.path.abspath(path))
    cwd = Path.cwd()
    if path == cwd:
        return "."
    if path.is_relative_to(cwd):
        rel = path.relative_to(cwd)
        return str(rel) if len(rel.parts) > 1 else f"./{rel}"
    return str(path)


def script(name: str) -> str:
    """The console script ``name`` (``flwr``, ``leakbed``...) as a command that works when typed here: the one beside
    this Python (its virtual environment's ``bin``, which need not be on PATH), shown by ``shown_path``; else PATH's."""
    beside = Path(sys.executable).parent / name  # not resolved: a venv's python is a link to the base interpreter
    if beside.is_file() and os.access(beside, os.X_OK):
        return shlex.quote(shown_path(beside))
    found = shutil.which(name)
    return shlex.quote(found) if found else name


def command(*words: str | Path) -> str:
    """Words as one shell command line (each quoted as needed)."""
    return shlex.join(str(w) for w in words)
