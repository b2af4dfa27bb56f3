"""The docs site: ``scripts/docs`` builds it into docs/_build/html, warnings as errors (tests/test_docs.py too)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

from synclane_provider import __version__  # noqa: E402

project = "SyncLane for Airflow"
author = "SyncLane contributors"
copyright = "SyncLane contributors"
version = release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "synclane_docs"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
root_doc = "index"

# Every heading down to ### is a link target, as GitHub makes them, so a link to a section is checked too.
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
add_module_names = False

html_theme = "furo"
html_title = f"SyncLane for Airflow {release}"
html_static_path: list[str] = []
pygments_style = "sphinx"
smartquotes = False  # `--force-deletions` stays two hyphens, quotes stay as typed
