"""Sphinx configuration: the pages in this folder plus an API reference from the docstrings."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import machin  # noqa: E402

project = "machin"
author = "The machin developers"
copyright = "2026, The machin developers"
release = version = machin.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
# The constructor documentation lists every keyword option with its default (see options.py).
autoclass_content = "both"
# Cross-references to third-party classes in signatures are not resolved here.
nitpicky = False
suppress_warnings = ["ref.python"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
