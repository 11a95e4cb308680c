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
import os
import sys
import warnings
from typing import Callable, Container, Dict, Iterable, Tuple, TypeVar

__all__ = ["ignores_extra_args", "ExtraArgumentsWarning", "drop_extra_args", "warn_caller"]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

F = TypeVar("F", bound=Callable)


class ExtraArgumentsWarning(UserWarning):
    """Arguments were passed that the method does not use; they were ignored."""


def ignores_extra_args(fn: F) -> F:
    """Accept and ignore extra positional and keyword arguments, with a warning.

    The wrapped function is called with the arguments it declares; positional arguments past
    its last positional parameter and keywords it does not name are dropped. Python's warning
    registry shows the :class:`ExtraArgumentsWarning` once per calling line. A call without
    extras costs the wrapper one length test and one test of the keywords.

    Args:
        fn: A function or method without ``*args`` / ``**kwargs`` of its own.

    Returns:
        The wrapper, whose signature shows the 0.3.4 form ``(..., *_, **__)``.

    Raises:
        TypeError: When ``fn`` takes ``*args`` or ``**kwargs``, or has a parameter named ``_``
            or ``__`` (the names the shown signature gives the extras).
    """
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise TypeError(f"{fn.__qualname__} already takes *args or **kwargs")
    clash = [p.name for p in params if p.name in ("_", "__")]
    if clash:
        raise TypeError(
            f"{fn.__qualname__} has parameters named {clash}, the names of the extras in its signature"
        )
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword_only = [p for p in params if p.kind == p.KEYWORD_ONLY]
    n_positional = len(positional)
    keywords = frozenset(p.name for p in params if p.kind != p.POSITIONAL_ONLY)
    # A method names the class of its instance in the warning (a subclass inheriting it), not the definer.
    is_method = bool(params) and params[0].name == "self"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > n_positional or (kwargs and not kwargs.keys() <= keywords):
            owner = (
                f"{type(args[0]).__name__}.{fn.__name__}" if is_method and args else fn.__qualname__
            )
            args, kwargs = drop_extra_args(owner, args, kwargs, n_positional, keywords)
        return fn(*args, **kwargs)

    # Show the 0.3.4 shape, ``(..., *_, **__)``, in help() and inspect.signature().
    wrapper.__signature__ = sig.replace(
        parameters=positional
        + [inspect.Parameter("_", inspect.Parameter.VAR_POSITIONAL)]
        + keyword_only
        + [inspect.Parameter("__", inspect.Parameter.VAR_KEYWORD)]
    )
    wrapper.__machin_ignores_extra_args__ = True
    return wrapper


#: Keywords of other RL libraries (Stable-Baselines3, Tianshou, CleanRL) and machin's options
#: for the same setting; the warning for an ignored keyword names those the callable takes.
OTHER_LIBRARY_NAMES: Dict[str, Tuple[str, ...]] = {
    "gamma": ("discount",),
    "tau": ("update_rate",),
    "buffer_size": ("replay_size",),
    "learning_rate": ("actor_learning_rate", "critic_learning_rate"),
    "lr": ("learning_rate", "actor_learning_rate", "critic_learning_rate"),
    "max_grad_norm": ("gradient_max",),
    "ent_coef": ("entropy_weight", "initial_entropy_alpha"),
    "vf_coef": ("value_weight",),
    "clip_range": ("surrogate_loss_clip",),
    "n_epochs": ("actor_update_times", "critic_update_times", "update_times"),
    "target_update_interval": ("update_steps",),
    "policy_delay": ("policy_update_delay",),
    "target_policy_noise": ("policy_noise",),
    "target_noise_clip": ("noise_clip",),
    "exploration_final_eps": ("epsilon_min",),
    "n_steps": ("n_step",),
}

#: Keywords of other libraries that are settings of machin's ``Trainer``, not of an algorithm.
TRAINER_NAMES: Dict[str, str] = {
    "train_freq": "train_freq",
    "gradient_steps": "gradient_steps",
    "learning_starts": "warmup_steps",
    "n_steps": "rollout_steps",
}


#: machin options that mean the negative of the other libraries' keyword.
_NEGATED = {("ent_coef", "entropy_weight")}


def _other_library_hint(key: str, names: Container[str]) -> str:
    """How machin spells the setting another library calls ``key`` ("" when it is not known)."""
    ours = [
        repr(name) + (" (negated)" if (key, name) in _NEGATED else "")
        for name in OTHER_LIBRARY_NAMES.get(key, ())
        if name in names
    ]
    if ours:
        return f"{key!r} is {' / '.join(ours)} in machin"
    if key in TRAINER_NAMES:
        return f"{key!r} is a setting of the loop: Trainer({TRAINER_NAMES[key]}=...)"
    return ""


def other_library_note(keys: Iterable[str], names: Container[str]) -> str:
    """The end of an ignored-keywords warning: machin's names for the ``keys`` other
    libraries use (``" Note: 'gamma' is 'discount' in machin."``), or ``""``.

    Args:
        keys: The ignored keywords.
        names: The keywords the callable takes.
    """
    hints = [hint for hint in (_other_library_hint(key, names) for key in keys) if hint]
    return f" Note: {'; '.join(hints)}." if hints else ""


def drop_extra_args(
    owner: str, args: tuple, kwargs: dict, n_positional: int, names: frozenset, stacklevel: int = 2
) -> Tuple[tuple, dict]:
    """Drop positional arguments past ``n_positional`` and keywords not in ``names``, warning once.

    Args:
        owner: The callable named in the warning, e.g. ``"DQN.__init__"``.
        args: The positional arguments given.
        kwargs: The keyword arguments given.
        n_positional: How many positional arguments the callable takes.
        names: The keywords it takes.
        stacklevel: Passed to ``warnings.warn`` (point it at the user's line).

    Returns:
        ``(args, kwargs)`` without the extras.
    """
    ignored = []
    if len(args) > n_positional:
        ignored.append(f"{len(args) - n_positional} positional argument(s)")
        args = args[:n_positional]
    extra_keys = [k for k in kwargs if k not in names]
    if extra_keys:
        ignored.append("keyword argument(s) " + ", ".join(repr(k) for k in extra_keys))
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    if ignored:
        warnings.warn(
            f"{owner}() does not use {' and '.join(ignored)}; ignored "
            f"(Machin 0.3.4 accepted and dropped them too).{other_library_note(extra_keys, names)}",
            ExtraArgumentsWarning,
            stacklevel=stacklevel + 1,
        )
    return args, kwargs


def warn_caller(message: str, category: type = UserWarning) -> None:
    """Warn with the location of the first caller outside machin (the user's line).

    Args:
        message: The warning text.
        category: The warning class.
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
