"""Values that change over training: schedules as functions of the training progress.

A schedule is a callable ``schedule(progress) -> float`` where ``progress`` is the
fraction of training done, in ``[0, 1]``: ``0`` at the start, ``1`` at the end. The
:class:`~machin.frame.trainer.Trainer` passes ``steps_done / total_steps``; a
hand-written loop computes the same fraction itself. Because a schedule sees a fraction
rather than a step count, the same schedule works for a run of any length::

    epsilon = LinearSchedule(1.0, 0.04, end_fraction=0.16)   # rl-baselines3-zoo's DQN epsilon
    epsilon(0.0), epsilon(0.08), epsilon(0.16), epsilon(0.9)  # 1.0, 0.52, 0.04, 0.04

    clip = LinearSchedule(0.2, 0.0)                          # the zoo's "lin_0.2" clip range
    lr = as_schedule(3e-4)                                   # a number: a constant schedule

Note the direction: Stable-Baselines3 calls its schedules with the progress
*remaining* (1 at the start, 0 at the end). A function written for it is used here
as ``as_schedule(lambda progress: sb3_function(1 - progress))``.

An algorithm applies a set of named schedules to its own attributes with
:func:`apply_schedules` (or keeps them in a :class:`ScheduledValues`), typically in a
``set_progress(progress)`` method that the trainer calls after every step.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Union

import torch

__all__ = [
    "Schedule",
    "ConstantSchedule",
    "LinearSchedule",
    "ExponentialSchedule",
    "FunctionSchedule",
    "as_schedule",
    "check_progress",
    "apply_schedules",
    "ScheduledValues",
    "set_learning_rate",
]

#: ``check(name, value) -> value``, raising ``TypeError`` / ``ValueError`` (as in
#: :mod:`machin.frame.algorithms.options`).
Check = Callable[[str, Any], Any]
ScheduleLike = Union[float, int, Callable[[float], float]]


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(
            f"{name} must be a finite real number, got {value!r} of type {type(value).__name__}"
        )
    return float(value)


def _end_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
        raise ValueError(f"end_fraction must be a number in (0, 1], got {value!r}")
    return float(value)


def check_progress(progress: Any) -> float:
    """Check that ``progress`` is a real number in ``[0, 1]`` and return it as a float.

    Args:
        progress: Fraction of training done (0 at the start, 1 at the end).

    Raises:
        TypeError: If ``progress`` is not a real number.
        ValueError: If it is outside ``[0, 1]`` (or NaN).
    """
    if isinstance(progress, bool) or not isinstance(progress, numbers.Real):
        raise TypeError(
            f"progress must be a real number in [0, 1], got {progress!r} of type {type(progress).__name__}"
        )
    if not 0 <= progress <= 1:
        raise ValueError(
            f"progress must be in [0, 1] (0: start of training, 1: end), got {progress!r}"
        )
    return float(progress)


class Schedule:
    """Base class of the schedules: ``schedule(progress)`` checks the progress, then :meth:`value`."""

    def __call__(self, progress: float) -> float:
        """The value at ``progress``.

        Args:
            progress: Fraction of training done, in ``[0, 1]``.

        Raises:
            TypeError: If ``progress`` is not a real number.
            ValueError: If ``progress`` is outside ``[0, 1]``.
        """
        return self.value(check_progress(progress))

    def value(self, progress: float) -> float:
        """The value at a progress already checked to lie in ``[0, 1]`` (implemented by subclasses).

        Args:
            progress: Fraction of training done, in ``[0, 1]``.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class ConstantSchedule(Schedule):
    """The same value at every progress.

    Args:
        constant: The value.

    Raises:
        TypeError: If ``constant`` is not a finite real number.
    """

    constant: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "constant", _finite("constant", self.constant))

    def value(self, progress: float) -> float:
        """``constant``, whatever the ``progress``."""
        return self.constant


@dataclass(frozen=True)
class LinearSchedule(Schedule):
    """From ``start`` to ``end`` in a straight line, reached at ``end_fraction``, then constant.

    ``value(p) = start + (end - start) * min(p / end_fraction, 1)``. It decreases or
    increases, whichever way ``start`` and ``end`` point. The zoo's epsilon "from 1 to
    0.04 over 16 % of training" is ``LinearSchedule(1.0, 0.04, 0.16)``; its ``lin_3e-4``
    learning rate is ``LinearSchedule(3e-4, 0.0)``.

    Args:
        start: Value at progress 0.
        end: Value from progress ``end_fraction`` on.
        end_fraction: Progress in ``(0, 1]`` at which ``end`` is reached.

    Raises:
        TypeError: If ``start`` or ``end`` is not a finite real number.
        ValueError: If ``end_fraction`` is not in ``(0, 1]``.
    """

    start: float
    end: float
    end_fraction: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _finite("start", self.start))
        object.__setattr__(self, "end", _finite("end", self.end))
        object.__setattr__(self, "end_fraction", _end_fraction(self.end_fraction))

    def value(self, progress: float) -> float:
        """The value at ``progress`` (see the class)."""
        if progress >= self.end_fraction:
            return self.end
        return self.start + (self.end - self.start) * (progress / self.end_fraction)


@dataclass(frozen=True)
class ExponentialSchedule(Schedule):
    """From ``start`` to ``end`` by a constant factor per unit of progress, then held at ``end``.

    ``value(p) = start * (end / start) ** min(p / end_fraction, 1)``: the geometric
    counterpart of :class:`LinearSchedule`. Over a run of ``T`` steps this is the
    multiplicative decay ``value *= factor`` at every step with
    ``factor = (end / start) ** (1 / (end_fraction * T))``, and ``end`` acts as the
    floor that Machin's own ``epsilon_decay`` lacks. Conversely, a per-step factor ``d``
    with a floor ``f`` over ``T`` steps is
    ``ExponentialSchedule(start, f, end_fraction=min(1, log(f / start) / (T * log(d))))``.

    Args:
        start: Value at progress 0; non-zero.
        end: Value from progress ``end_fraction`` on (the floor of a decay, the ceiling of
            a growth); non-zero and of the same sign as ``start``.
        end_fraction: Progress in ``(0, 1]`` at which ``end`` is reached.

    Raises:
        TypeError: If ``start`` or ``end`` is not a finite real number.
        ValueError: If ``start`` or ``end`` is zero, their signs differ, or ``end_fraction``
            is not in ``(0, 1]``.
    """

    start: float
    end: float
    end_fraction: float = 1.0

    def __post_init__(self) -> None:
        start, end = _finite("start", self.start), _finite("end", self.end)
        if start == 0 or end == 0 or (start > 0) != (end > 0):
            raise ValueError(
                f"ExponentialSchedule needs start and end non-zero and of the same sign, got start={start!r}, "
                f"end={end!r} (use LinearSchedule to reach 0)"
            )
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "end_fraction", _end_fraction(self.end_fraction))

    def value(self, progress: float) -> float:
        """The value at ``progress`` (see the class)."""
        if progress >= self.end_fraction:
            return self.end
        return self.start * (self.end / self.start) ** (progress / self.end_fraction)


class FunctionSchedule(Schedule):
    """A function of the progress as a schedule: the progress is checked, the result must be a real number.

    Args:
        function: ``function(progress) -> number``, with ``progress`` in ``[0, 1]`` (0 at
            the start of training).

    Raises:
        TypeError: If ``function`` is not callable.
    """

    def __init__(self, function: Callable[[float], float]) -> None:
        if not callable(function):
            raise TypeError(
                f"function must be callable, got {function!r} of type {type(function).__name__}"
            )
        self.function = function

    def value(self, progress: float) -> float:
        """``function(progress)`` as a float.

        Raises:
            TypeError: If the function does not return a real number.
        """
        result = self.function(progress)
        if isinstance(result, torch.Tensor) and result.numel() == 1:
            result = result.item()
        if isinstance(result, bool) or not isinstance(result, numbers.Real):
            raise TypeError(
                f"the schedule function {self.function!r} must return a real number, got {result!r} "
                f"of type {type(result).__name__} at progress {progress!r}"
            )
        return float(result)

    def __repr__(self) -> str:
        return f"FunctionSchedule({self.function!r})"


def as_schedule(value: ScheduleLike, name: str = "schedule") -> Schedule:
    """A :class:`Schedule` from a number (a constant), a schedule (returned as is) or a function.

    Args:
        value: A real number, a :class:`Schedule`, or a callable of the progress.
        name: What to call ``value`` in error messages (e.g. the option's name).

    Raises:
        TypeError: If ``value`` is none of these (or a bool, or not finite).
    """
    if isinstance(value, Schedule):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return ConstantSchedule(_finite(name, value))
    if callable(value):
        return FunctionSchedule(value)
    raise TypeError(
        f"{name} must be a number, a Schedule or a function of the progress in [0, 1], got {value!r} "
        f"of type {type(value).__name__}"
    )


def _schedule_map(schedules: Mapping[str, ScheduleLike]) -> Dict[str, Schedule]:
    if not isinstance(schedules, Mapping):
        raise TypeError(
            f"schedules must be a mapping of attribute names to schedules, got {type(schedules).__name__}"
        )
    checked = {}
    for key, value in schedules.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise TypeError(f"schedules must be keyed by attribute names, got the key {key!r}")
        checked[key] = as_schedule(value, f"schedules[{key!r}]")
    return checked


def _check_map(checks: Optional[Mapping[str, Check]], names: Any) -> Dict[str, Check]:
    if checks is None:
        return {}
    if not isinstance(checks, Mapping):
        raise TypeError(
            f"checks must be a mapping of attribute names to check functions or None, "
            f"got {type(checks).__name__}"
        )
    for key, check in checks.items():
        if not callable(check):
            raise TypeError(
                f"checks[{key!r}] must be callable as check(name, value), got {check!r}"
            )
    unknown = sorted(set(checks) - set(names))
    if unknown:
        raise ValueError(
            f"checks names {unknown}, which have no schedule; the schedules are {sorted(names)}"
        )
    return dict(checks)


class ScheduledValues:
    """Named schedules evaluated together at one progress, each value checked.

    Made once (e.g. in an algorithm's constructor) and applied at every
    ``set_progress(progress)``::

        self._scheduled = ScheduledValues({"epsilon": epsilon_schedule}, {"epsilon": probability})

        def set_progress(self, progress):
            values = self._scheduled.apply(self, progress)        # sets self.epsilon
            if "learning_rate" in values:
                set_learning_rate(self.qnet_optim, values["learning_rate"])

    Args:
        schedules: ``{attribute name: schedule}``; a number stands for a constant and a
            function for :class:`FunctionSchedule` (see :func:`as_schedule`).
        checks: ``{attribute name: check}`` with ``check(name, value) -> value`` raising
            ``TypeError`` / ``ValueError`` (the option checks of
            :mod:`machin.frame.algorithms.options` fit); names without a check take the
            value as it is.

    Raises:
        TypeError: If a schedule, a name or a check has the wrong type.
        ValueError: If ``checks`` names an attribute that has no schedule.
    """

    def __init__(
        self, schedules: Mapping[str, ScheduleLike], checks: Optional[Mapping[str, Check]] = None
    ) -> None:
        self.schedules = _schedule_map(schedules)
        self.checks = _check_map(checks, self.schedules)

    def values(self, progress: float) -> Dict[str, float]:
        """Every schedule's value at ``progress``, checked.

        Args:
            progress: Fraction of training done, in ``[0, 1]``.

        Raises:
            TypeError, ValueError: If ``progress`` is not in ``[0, 1]``, or a check rejects
                a value (its message names the attribute and the progress).
        """
        progress = check_progress(progress)
        values = {}
        for name, schedule in self.schedules.items():
            value = schedule(progress)
            check = self.checks.get(name)
            if check is not None:
                try:
                    value = check(name, value)
                except (TypeError, ValueError) as error:
                    raise type(error)(
                        f"{error} (the value of its schedule {schedule!r} at progress {progress!r})"
                    ) from None
            values[name] = value
        return values

    def apply(self, obj: Any, progress: float) -> Dict[str, float]:
        """Set each attribute of ``obj`` to its schedule's value at ``progress``; return the values set.

        Every value is computed and checked before the first attribute is set, so a
        rejected value leaves ``obj`` unchanged.

        Args:
            obj: The object whose attributes are set (an algorithm).
            progress: Fraction of training done, in ``[0, 1]``.

        Raises:
            TypeError, ValueError: As :meth:`values`.
        """
        values = self.values(progress)
        for name, value in values.items():
            setattr(obj, name, value)
        return values

    def __repr__(self) -> str:
        return f"ScheduledValues({self.schedules!r})"


def apply_schedules(
    obj: Any,
    progress: float,
    schedules: Mapping[str, ScheduleLike],
    checks: Optional[Mapping[str, Check]] = None,
) -> Dict[str, float]:
    """Evaluate ``schedules`` at ``progress``, check the values, set them as attributes of ``obj``.

    The one-call form of :class:`ScheduledValues`: ``apply_schedules(dqn, 0.5,
    {"epsilon": LinearSchedule(1.0, 0.04, 0.16)}, {"epsilon": probability})`` sets
    ``dqn.epsilon = 0.04``. Nothing is set when a value is rejected.

    Args:
        obj: The object whose attributes are set.
        progress: Fraction of training done, in ``[0, 1]``.
        schedules: ``{attribute name: schedule, number or function of the progress}``.
        checks: ``{attribute name: check(name, value) -> value}``, optional per name.

    Returns:
        ``{attribute name: value set}``.

    Raises:
        TypeError, ValueError: If an argument has the wrong type, ``progress`` is outside
            ``[0, 1]`` or a check rejects a value.
    """
    return ScheduledValues(schedules, checks).apply(obj, progress)


def set_learning_rate(optimizer: torch.optim.Optimizer, learning_rate: float) -> None:
    """Set the learning rate of every parameter group of ``optimizer``.

    For a scheduled learning rate: call it from ``set_progress`` with the scheduled value.
    A ``torch.optim.lr_scheduler`` on the same optimizer would overwrite it at its next
    ``step``; use one or the other.

    Args:
        optimizer: A ``torch.optim.Optimizer``.
        learning_rate: The new learning rate, a non-negative finite number.

    Raises:
        TypeError: If ``optimizer`` is not an optimizer or ``learning_rate`` not a real number.
        ValueError: If ``learning_rate`` is negative.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    learning_rate = _finite("learning_rate", learning_rate)
    if learning_rate < 0:
        raise ValueError(f"learning_rate must be non-negative, got {learning_rate!r}")
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
