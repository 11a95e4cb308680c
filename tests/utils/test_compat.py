"""machin.utils.compat.ignores_extra_args: extra arguments dropped with a warning, the rest passed on as given."""

import inspect
import os
import traceback
import warnings

import pytest

from machin.utils.compat import ExtraArgumentsWarning, ignores_extra_args

_DEFAULT = []


class Base:
    @ignores_extra_args
    def method(self, a, b=2, *, c=_DEFAULT):
        return a, b, c

    @staticmethod
    @ignores_extra_args
    def static(x, y=1):
        return x + y

    @ignores_extra_args
    def positional_only(self, a, /, b=4):
        return a, b

    @ignores_extra_args
    def shadowing(self, type=None, len=0):  # parameters named like the builtins a wrapper might use
        return type, len

    @ignores_extra_args
    def failing(self, value):
        raise ValueError(f"value {value} refused")


class Child(Base):
    pass


def test_declared_arguments_reach_the_method_unchanged():
    obj = Child()
    assert (
        obj.method(1) == (1, 2, _DEFAULT) and obj.method(1)[2] is _DEFAULT
    )  # the default object itself
    assert obj.method(1, 5, c=7) == (1, 5, 7) and obj.method(a=1, b=3) == (1, 3, _DEFAULT)
    assert Base.static(2) == 3 and obj.positional_only(1, 2) == (1, 2)


def test_signature_shows_the_0_3_4_form():
    assert str(inspect.signature(Base.method)) == "(self, a, b=2, *_, c=[], **__)"
    assert str(inspect.signature(Base.positional_only)) == "(self, a, /, b=4, *_, **__)"
    assert Base.method.__name__ == "method" and Base.method.__qualname__ == "Base.method"
    assert Base.method.__wrapped__(Child(), 1) == (1, 2, _DEFAULT)


def test_extras_are_dropped_with_a_warning_at_the_calling_line():
    obj = Child()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert obj.method(1, 2, 3, c=4, z=5) == (1, 2, 4)
        assert Base.static(1, 2, 3) == 3
        assert obj.shadowing("t", 1, 2) == ("t", 1)
    assert [type(w.message) for w in caught] == [ExtraArgumentsWarning] * 3
    assert (
        "Child.method() does not use 1 positional argument(s) and keyword argument(s) 'z'"
        in str(caught[0].message)
    )
    assert "Base.static() does not use 1 positional argument(s)" in str(caught[1].message)
    assert "Child.shadowing() does not use 1 positional argument(s)" in str(caught[2].message)
    assert {w.filename for w in caught} == {__file__}


def test_calls_without_extras_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Child().method(1, b=1) == (1, 1, _DEFAULT)


def test_python_errors_name_the_method():  # with its class from Python 3.11 (co_qualname)
    with pytest.raises(
        TypeError, match=r"(Base\.)?method\(\) missing 1 required positional argument: 'a'"
    ):
        Child().method()
    with pytest.raises(
        TypeError, match=r"(Base\.)?method\(\) got multiple values for argument 'a'"
    ):
        Child().method(1, a=2)


def test_functions_it_cannot_wrap_are_refused():
    with pytest.raises(TypeError, match="already takes"):
        ignores_extra_args(lambda *args: None)
    with pytest.raises(
        TypeError, match=r"parameters named \['_'\]"
    ):  # the name the signature gives *_
        ignores_extra_args(lambda _, x: None)
    assert ignores_extra_args(lambda __fn__, fn=1: (__fn__, fn))(2, 3) == (2, 3)


def test_tracebacks_show_source_lines():
    with pytest.raises(ValueError, match="value 3 refused") as caught:
        Child().failing(3)
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert [frame.name for frame in frames[-2:]] == ["wrapper", "failing"]
    for frame in frames:
        assert os.path.isfile(frame.filename) and frame.line, f"a frame without source: {frame}"
