"""MkDocs hook: write the generated reference pages (``leakbed.reference``) before the build reads the docs tree."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def on_pre_build(config: Any, **_: Any) -> None:
    root = str(Path(config.config_file_path).resolve().parent)  # the checkout the site documents, not another install
    if root not in sys.path:
        sys.path.insert(0, root)
    from leakbed.reference.pages import write

    write(Path(config["docs_dir"]) / "reference")
