"""The constructor signatures written out on the algorithm pages match the classes.

Each page of ``docs/algorithms_*.rst`` shows its algorithms' constructors in code
blocks (``DQN(qnet, ..., *, lr_scheduler=None, ...)``). They are written by hand, so
this test keeps them from falling behind: every keyword option of the class is listed,
nothing else is, and each default that is a plain literal is the class's default.
"""

import ast
import inspect
import math
import pathlib
import re

import pytest

from machin.frame import algorithms

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)")
_CALL = re.compile(r"^    ([A-Z][A-Za-z0-9]*)\((.*)", re.DOTALL)
_KEYWORD = re.compile(r"(\w+)=([^,=]+?)(?=,\s*\w+=|\)\s*$|,\s*$)", re.MULTILINE)


def _documented_signatures():
    """``(page, class name, {keyword: default text})`` for every constructor block."""
    found = []
    for page in sorted(DOCS.glob("algorithms_*.rst")):
        for block in _BLOCK.findall(page.read_text()):
            match = _CALL.match(block)
            if match is None or not hasattr(algorithms, match.group(1)) or ", *," not in block:
                continue
            keywords = block.split(", *,", 1)[1]
            found.append((page.name, match.group(1), dict(_KEYWORD.findall(keywords))))
    return found


SIGNATURES = _documented_signatures()


def test_the_pages_show_the_main_constructors():
    shown = {name for _, name, _ in SIGNATURES}
    assert {"DQN", "A2C", "SAC", "DDPG"} <= shown, shown


@pytest.mark.parametrize(
    "page, name, documented", SIGNATURES, ids=[f"{p}:{n}" for p, n, _ in SIGNATURES]
)
def test_a_documented_signature_lists_every_option_with_its_default(page, name, documented):
    parameters = inspect.signature(getattr(algorithms, name)).parameters.values()
    options = {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}
    assert sorted(set(options) - set(documented)) == [], (
        f"{page} does not show these options of {name}"
    )
    assert sorted(set(documented) - set(options)) == [], (
        f"{page} shows options {name} does not take"
    )
    for key, text in documented.items():
        text = text.strip()
        if text == "inf":
            assert options[key] == math.inf, (page, name, key)
            continue
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue  # an expression or a name: shown for the reader, not compared
        assert options[key] == value, (
            f"{page}: {name}({key}=...) defaults to {options[key]!r}, the page says {text}"
        )
