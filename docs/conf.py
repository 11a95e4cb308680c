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
# The signature lists every keyword option with its default; each is documented as an attribute (options.py).
autoclass_content = "both"
# Cross-references to third-party classes in signatures are not resolved here.
nitpicky = False
suppress_warnings = ["ref.python"]
exclude_patterns = ["_build"]
# A maintained theme with a search box and a sidebar of every page.
html_theme = "furo"
html_title = f"machin {release}"
# Long signatures are wrapped, one parameter per line, instead of running off the page.
python_maximum_signature_line_length = 88


# Machin 0.3.4's constructors take extra positional and keyword arguments (ignored with a
# warning); their signatures hold them as ``*_`` and ``**__``, which say nothing to a reader.
def _split_parameters(inner):
    """The parameters of a signature's text (without its parentheses), split at top-level commas."""
    parts, depth, quote, current = [], 0, None, ""
    for char in inner:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        else:
            depth += char in "([{"
            depth -= char in ")]}"
        if char == "," and depth == 0 and quote is None:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [part for part in parts + [current.strip()] if part]


def _hide_ignored_extras(app, what, name, obj, options, signature, return_annotation):
    """Drop ``*_`` and ``**__`` from a shown signature (a bare ``*`` stays before keywords)."""
    if not signature or not signature.startswith("(") or "*_" not in signature:
        return None
    parameters = [p for p in _split_parameters(signature[1:-1]) if p != "**__"]
    if "*_" in parameters:
        position = parameters.index("*_")
        parameters[position] = "*"
        if position == len(parameters) - 1:  # nothing keyword-only follows
            del parameters[position]
    return f"({', '.join(parameters)})", return_annotation


def setup(app):
    app.connect("autodoc-process-signature", _hide_ignored_extras)
