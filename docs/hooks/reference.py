"""MkDocs hook: add the generated reference pages (``leakbed.reference``) to the build's files.

The pages exist only in the build (``File.generated``): a build, wherever its ``--site-dir``, never writes
into the checkout's ``docs/`` folder, so ``docs/reference/<page>.md`` is neither written nor committed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

FOLDER = "reference"  # the pages' folder in the site, as mkdocs.yml's nav names them


def on_files(files: Files, config: Any, **_: Any) -> Files:
    root = str(Path(config.config_file_path).resolve().parent)  # the checkout the site documents, not another install
    if root not in sys.path:
        sys.path.insert(0, root)
    from leakbed.reference.pages import generate

    for name, text in generate().items():
        src_uri = f"{FOLDER}/{name}"
        stale = files.get_file_from_path(src_uri)  # a copy an older build wrote into docs/ (ignored by git)
        if stale is not None:
            files.remove(stale)
        files.append(File.generated(config, src_uri, content=text))
    return files
