"""Print pyproject.toml's pinned dependencies (and the `build` extra), one per line.

The image installs these in a layer of their own before it copies the code, so a code change
rebuilds only the small layers after it (torch alone is several GB)."""

import sys
import tomllib

project = tomllib.load(open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb"))["project"]
print("\n".join([*project["dependencies"], *project["optional-dependencies"]["build"]]))
