"""Keeping Machin 0.3.4 calls working.

Many 0.3.4 signatures ended in ``*_, **__``: arguments a method did not use were accepted and
dropped, so one call could be written for several algorithms (``update(update_value=True,
update_policy=True, update_target=True)`` on A2C, ``replay_device=...`` on DQNApex).
:func:`ignores_extra_args` restores that for the methods that had it, but never silently: the
first call from each line of user code that passes something unused gets a ``UserWarning``
naming what was ignored, so a misspelt keyword is still seen.
"""

import functools
import inspect
import warnings
from typing import Callable, TypeVar

__all__ = ["ignores_extra_args", "ExtraArgumentsWarning"]

F = TypeVar("F", bound=Callable)


class ExtraArgumentsWarning(UserWarning):
    """Arguments were passed that the method does not use; they were ignored."""


def ignores_extra_args(fn: F) -> F:
    """Accept and ignore extra positional and keyword arguments, with a warning.

    The wrapped function is called with the arguments it declares; positional arguments past
    its last positional parameter and keywords it does not name are dropped. Python's warning
    registry shows the :class:`ExtraArgumentsWarning` once per calling line. A call without
    extras costs one length check and one set comparison.
    """
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise TypeError(f"{fn.__qualname__} already takes *args or **kwargs")
    n_positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    names = frozenset(p.name for p in params if p.kind != p.POSITIONAL_ONLY)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) <= n_positional and names.issuperset(kwargs):
            return fn(*args, **kwargs)
        ignored = []
        if len(args) > n_positional:
            ignored.append(f"{len(args) - n_positional} positional argument(s)")
            args = args[:n_positional]
        extra_keys = [k for k in kwargs if k not in names]
        if extra_keys:
            ignored.append("keyword argument(s) " + ", ".join(repr(k) for k in extra_keys))
            kwargs = {k: v for k, v in kwargs.items() if k in names}
        warnings.warn(
            f"{fn.__qualname__}() does not use {' and '.join(ignored)}; ignored "
            f"(Machin 0.3.4 accepted and dropped them too).",
            ExtraArgumentsWarning,
            stacklevel=2,
        )
        return fn(*args, **kwargs)

    # Show the 0.3.4 shape, ``(..., *_, **__)``, in help() and inspect.signature().
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword_only = [p for p in params if p.kind == p.KEYWORD_ONLY]
    wrapper.__signature__ = sig.replace(
        parameters=positional
        + [inspect.Parameter("_", inspect.Parameter.VAR_POSITIONAL)]
        + keyword_only
        + [inspect.Parameter("__", inspect.Parameter.VAR_KEYWORD)]
    )
    wrapper.__machin_ignores_extra_args__ = True
    return wrapper
