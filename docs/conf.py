"""Sphinx configuration of the matmech documentation site.

Build (warnings are errors, the examples run):  sphinx-build -W --keep-going -b html docs docs/_build/html
Pages are MyST Markdown; the API reference is generated from the docstrings (numpydoc
sections) by autosummary; examples/*.py are executed by sphinx-gallery; the CLI reference
comes from matmech.cli.build_parser (sphinx-argparse).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, installed or not
# ... and let examples that start `python -m matmech.cli` find it too
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
)
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import matmech  # noqa: E402

project = "matmech"
author = "the matmech authors"
copyright = "2026, the matmech authors"
release = version = matmech.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "sphinxarg.ext",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = [
    "_build",
    "Thumbs.db",
    ".DS_Store",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.json",
]
templates_path = ["_templates"]

# -- MyST ---------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3
suppress_warnings = [
    "myst.header",  # pages may start at ## after a short intro
]

# -- API reference ------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # numpydoc's Parameters section carries the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# -- Gallery ------------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r".*\.py$",  # execute every example (each takes seconds)
    "ignore_pattern": r"(/data/|__init__\.py)",
    "plot_gallery": "True",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "min_reported_time": 1,
    "within_subsection_order": "FileNameSortKey",
}

# -- HTML ---------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"matmech {release}"
html_theme_options = {
    "description": "The Matrix Mechanism for linear queries under differential privacy",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "240px",
}
