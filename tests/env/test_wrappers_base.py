"""Tests for machin.env.wrappers.base.ParallelWrapperBase."""

import pytest

from machin.env.wrappers import ParallelWrapperBase
from machin.env.wrappers.base import ParallelWrapperBase as DirectBase
from machin.utils.compat import ExtraArgumentsWarning

DOCUMENTED_ABSTRACT = {
    "reset",
    "step",
    "seed",
    "render",
    "close",
    "active",
    "size",
    "action_space",
    "observation_space",
}


def _complete_members():
    return {
        "reset": lambda self, idx=None: [0],
        "step": lambda self, action, idx=None: ([0], [0.0], [False], [{}]),
        "seed": lambda self, seed=None: [seed],
        "render": lambda self, *a, **k: [],
        "close": lambda self: None,
        "active": lambda self: [0],
        "size": lambda self: 1,
        "action_space": property(lambda self: "actions"),
        "observation_space": property(lambda self: "observations"),
    }


def test_base_is_abstract_and_exported():
    assert ParallelWrapperBase is DirectBase
    with pytest.raises(TypeError, match="abstract"):
        ParallelWrapperBase()


def test_documented_methods_and_properties_are_abstract():
    assert ParallelWrapperBase.__abstractmethods__ == frozenset(DOCUMENTED_ABSTRACT)


@pytest.mark.parametrize("missing", sorted(DOCUMENTED_ABSTRACT))
def test_a_subclass_missing_one_member_cannot_be_instantiated(missing):
    members = _complete_members()
    del members[missing]
    incomplete = type("Incomplete", (ParallelWrapperBase,), members)
    with pytest.raises(TypeError, match=missing):
        incomplete()


def test_a_complete_subclass_works_and_ignores_constructor_arguments():
    complete = type("Complete", (ParallelWrapperBase,), _complete_members())
    with pytest.warns(ExtraArgumentsWarning, match="'option'"):
        wrapper = complete("ignored", option=1)
    assert wrapper.size() == 1
    assert wrapper.seed(3) == [3]
    assert wrapper.action_space == "actions"
    assert wrapper.observation_space == "observations"
