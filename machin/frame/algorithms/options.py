"""Constructor options: declared once per concept, checked in one place, read as plain attributes.

The whole mechanism, in four parts:

1. **Declaration.** An algorithm declares each keyword option of its constructor as a class
   attribute, ``name = Option(default, check, doc)``. Options are inherited: a subclass lists
   only what it adds or changes (``update_rate = DDPG.update_rate.but(default=0.005)``), and
   a plain class attribute of the same name (``mode = "double"``) fixes an inherited option,
   which is then no longer accepted. :func:`option_specs` collects them along the MRO.
2. **Construction.** Every constructor takes its networks, optimizer, ... positionally, then
   ``*_, **options``, and passes ``*_, **options`` on to ``super().__init__``.
   ``TorchFramework.__init__`` (in ``base.py``) assigns every option, given or default, with
   ``setattr``, and warns (:class:`~machin.utils.compat.ExtraArgumentsWarning`) about extra
   positional arguments and unknown keywords, which Machin 0.3.4 also accepted and ignored.
   A user's subclass written the 0.3.4 way (its own ``__init__(self, *args, **kwargs)``
   calling ``super().__init__(*args, **kwargs)``) therefore just works.
3. **Checking.** An :class:`Option` is a data descriptor with a ``__set__`` and no
   ``__get__``: every assignment, in the constructor or later (``dqn.discount = 2``), runs
   the option's check, which raises ``TypeError`` / ``ValueError`` naming the option and the
   value. Reading ``self.discount`` is an ordinary attribute read (Python finds no
   ``__get__`` and returns the instance's value). A *schedulable* option also takes a
   schedule (see :mod:`machin.utils.schedules`); ``set_progress`` moves it along.
4. **Presentation.** ``FrameworkType``, the metaclass of ``TorchFramework`` (in ``base.py``), does two
   small things: it gives each algorithm class a ``__signature__`` (:func:`constructor_signature`:
   the positional arguments, ``*_``, every option with its default, ``**__``), which
   ``inspect.signature`` and ``help()`` show, and it calls ``_after_init`` (the
   learning-rate schedulers) once the whole constructor, every subclass's part, has run.
"""

from __future__ import annotations

import inspect
import numbers
from typing import Any, Callable, Dict, Optional

from ...utils.compat import ExtraArgumentsWarning, other_library_note, warn_caller

__all__ = [
    "Option",
    "option_specs",
    "constructor_signature",
    "warn_extra_arguments",
    "real",
    "positive",
    "positive_int",
    "non_negative",
    "non_negative_int",
    "unit_interval",
    "probability",
    "optional",
    "one_of",
    "BufferOptions",
    "ActorCriticOptions",
    "SoftTargetOptions",
    "OneLearningRate",
]

Check = Callable[[str, Any], Any]


def _not_real(value: Any) -> bool:
    if type(value) is float or type(value) is int:  # the usual case, without the slower ABC test
        return False
    return isinstance(value, bool) or not isinstance(value, numbers.Real)


def _not_integer(value: Any) -> bool:
    if type(value) is int:
        return False
    return isinstance(value, bool) or not isinstance(value, numbers.Integral)


def _wrong_type(name: str, what: str, value: Any) -> TypeError:
    return TypeError(f"{name} must be {what}, got {value!r} of type {type(value).__name__}")


def real(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number; return it (errors name the option ``name``)."""
    if _not_real(value):
        raise _wrong_type(name, "a real number", value)
    return value


def positive(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number above 0 (``inf`` allowed); return it (errors name the option ``name``)."""
    if _not_real(value):
        raise _wrong_type(name, "a positive real number", value)
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return value


def positive_int(name: str, value: Any) -> Any:
    """Check that ``value`` is an integer above 0; return it (errors name the option ``name``)."""
    if _not_integer(value):
        raise _wrong_type(name, "a positive integer", value)
    if not value > 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def non_negative(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number of at least 0; return it (errors name the option ``name``)."""
    if _not_real(value):
        raise _wrong_type(name, "a non-negative real number", value)
    if not value >= 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return value


def non_negative_int(name: str, value: Any) -> Any:
    """Check that ``value`` is an integer of at least 0; return it (errors name the option ``name``)."""
    if _not_integer(value):
        raise _wrong_type(name, "a non-negative integer", value)
    if not value >= 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def unit_interval(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number in ``(0, 1]`` (a rate or a decay factor); return it (errors name the option ``name``)."""
    if _not_real(value):
        raise _wrong_type(name, "a real number in (0, 1]", value)
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return value


def probability(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number in ``[0, 1]`` (a discount, a lambda); return it (errors name the option ``name``)."""
    if _not_real(value):
        raise _wrong_type(name, "a real number in [0, 1]", value)
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return value


def optional(check: Check) -> Check:
    """``check``, but ``None`` passes."""

    def optional_check(name: str, value: Any) -> Any:
        if value is None:
            return None
        try:
            return check(name, value)
        except TypeError as error:  # a wrong type: say that None is the other choice
            raise TypeError(
                str(error).replace(f"{name} must be ", f"{name} must be None or ", 1)
            ) from None

    optional_check.__doc__ = f"``None`` or: {check.__doc__}"
    return optional_check


def one_of(*choices: Any) -> Check:
    """One of ``choices``."""

    def choice_check(name: str, value: Any) -> Any:
        if value not in choices:
            raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
        return value

    return choice_check


class Option:
    """One keyword option of an algorithm's constructor, kept as a checked attribute.

    Assigning ``algorithm.<name> = value`` (the constructor does it too) runs ``check``
    and stores the result in the instance; reading the attribute is an ordinary read.
    On the class, the name gives the option itself (``DQN.discount``). A *schedulable*
    option also takes a schedule (a callable of the training progress, see
    :mod:`machin.utils.schedules`) instead of a number: the attribute then holds the
    schedule's value, which
    :meth:`~machin.frame.algorithms.base.TorchFramework.set_progress` moves along as
    training goes on; assigning a plain value ends the schedule.

    Args:
        default: The value used when the caller does not pass the option.
        check: ``check(name, value) -> value``: raises ``TypeError`` / ``ValueError`` for a
            bad value, returns the value to store. ``None``: any value.
        doc: One sentence for the documentation.
        schedulable: Accept a schedule as well as a value.
        schedule_check: Check of a schedule's values (default: ``check``); e.g. a learning
            rate given as a number must be positive, but a schedule may decay it to 0.
    """

    def __init__(
        self,
        default: Any,
        check: Optional[Check] = None,
        doc: str = "",
        *,
        schedulable: bool = False,
        schedule_check: Optional[Check] = None,
    ):
        self.name = ""
        self.default = default
        self.check = check
        self.doc = doc
        self.schedulable = schedulable
        self.schedule_check = schedule_check
        self.__doc__ = (
            f"{doc} (keyword option, default ``{default!r}``)".lstrip()
        )  # what help() shows

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __set__(self, algorithm: Any, value: Any) -> None:
        if self.schedulable and callable(value) and not isinstance(value, numbers.Number):
            self.set_scheduled(algorithm, value(algorithm._progress))
            algorithm._schedules[self.name] = value
            return
        if self.check is not None:
            value = self.check(self.name, value)
        algorithm._schedules.pop(self.name, None)
        vars(algorithm)[self.name] = value
        algorithm._option_changed(self.name, value)

    def set_scheduled(self, algorithm: Any, value: Any) -> None:
        """Check a value of the option's schedule (with ``schedule_check``) and store it; the schedule stays.

        Args:
            algorithm: The instance whose option it is.
            value: The schedule's value at the current progress.
        """
        check = self.schedule_check or self.check
        if check is not None:
            value = check(self.name, value)
        vars(algorithm)[self.name] = value
        algorithm._option_changed(self.name, value)

    def but(self, **changes: Any) -> Option:
        """A copy with some fields changed, e.g. ``DDPG.update_rate.but(default=0.005)``."""
        fields = {
            "default": self.default,
            "check": self.check,
            "doc": self.doc,
            "schedulable": self.schedulable,
            "schedule_check": self.schedule_check,
        }
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(
                f"Option.but() got unknown field(s) {sorted(unknown)}; fields are {sorted(fields)}"
            )
        return Option(**{**fields, **changes})

    def __repr__(self) -> str:
        return f"Option({self.name}={self.default!r})"


def option_specs(cls: type) -> Dict[str, Option]:
    """The options of ``cls`` in declaration order (base classes first), later classes overriding.

    A subclass turns an inherited option into a fixed value by assigning a plain class
    attribute of its name (e.g. ``mode = "double"``): the option is then not accepted.
    """
    specs: Dict[str, Option] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Option):
                specs[name] = value
            elif name in specs:
                del specs[name]
    return specs


def warn_extra_arguments(
    algorithm: Any, extra_args: tuple, given: Dict[str, Any], specs: Dict[str, Option]
) -> None:
    """Warn (:class:`~machin.utils.compat.ExtraArgumentsWarning`, at the caller's line) about
    extra positional arguments and keywords that are not options; the constructor ignores them.

    Args:
        algorithm: The instance being constructed (its class is named in the warning).
        extra_args: The extra positional arguments.
        given: The keyword arguments given.
        specs: The options of the class (:func:`option_specs`).
    """
    unknown = [name for name in given if name not in specs]
    if not extra_args and not unknown:
        return
    ignored = [f"{len(extra_args)} positional argument(s)"] if extra_args else []
    if unknown:
        ignored.append("keyword argument(s) " + ", ".join(repr(name) for name in unknown))
    warn_caller(
        f"{type(algorithm).__name__}.__init__() does not use {' and '.join(ignored)}; ignored "
        f"(Machin 0.3.4 accepted and dropped them too).{other_library_note(unknown, specs)}",
        ExtraArgumentsWarning,
    )


def constructor_signature(cls: type) -> inspect.Signature:
    """The signature ``inspect.signature(cls)`` and ``help(cls)`` show.

    For a constructor of the usual form ``__init__(self, <positional>, *_, **options)``: the
    positional arguments, ``*_``, every option of ``cls`` as a keyword with its default, then
    ``**__`` (the form of Machin 0.3.4's constructors). Any other constructor (a user's
    subclass taking ``*args, **kwargs``) shows its own signature.
    """
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
    kinds = [p.kind for p in params]
    if inspect.Parameter.KEYWORD_ONLY in kinds or kinds[-2:] != [
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    ]:
        return inspect.Signature(params)
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=spec.default)
        for name, spec in option_specs(cls).items()
    ]
    return inspect.Signature(
        params[:-2]
        + [inspect.Parameter("_", inspect.Parameter.VAR_POSITIONAL)]
        + options
        + [inspect.Parameter("__", inspect.Parameter.VAR_KEYWORD)]
    )


def _buffer(name: str, value: Any) -> Any:
    from ..buffers import Buffer

    if not isinstance(value, Buffer):
        raise TypeError(f"{name} must be a Buffer, got {type(value).__name__}")
    return value


class BufferOptions:
    """The options of every algorithm that learns from batches drawn from a buffer."""

    batch_size = Option(100, positive_int, "Samples per update.")
    discount = Option(0.99, probability, "Discount factor gamma.")
    replay_size = Option(500000, positive_int, "Capacity of the default buffer.")
    replay_device = Option("cpu", doc="Device of the default buffer.")
    replay_buffer = Option(
        None,
        optional(_buffer),
        "A buffer to use instead of the default one "
        "(``replay_size`` and ``replay_device`` are then not used); the attribute "
        "holds the buffer in use.",
    )


class ActorCriticOptions:
    """The learning rates of algorithms with an actor and critics."""

    actor_learning_rate = Option(
        0.0005,
        positive,
        "Learning rate of the actor optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    critic_learning_rate = Option(
        0.001,
        positive,
        "Learning rate of the critic optimizer(s) (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    _learning_rate_of = {
        "actor_learning_rate": ("actor_optim",),
        "critic_learning_rate": ("critic_optim", "critic2_optim"),
    }


class SoftTargetOptions:
    """The rate of soft target-network updates."""

    update_rate = Option(
        0.005,
        unit_interval,
        "Soft update rate tau: ``target = tau * online + (1 - tau) * target``.",
    )


class OneLearningRate:
    """One ``learning_rate`` for the actor's and the critic's optimizers (Ape-X DDPG, IMPALA).

    Mixed in before the algorithm class, it replaces the two learning-rate options.
    """

    learning_rate = ActorCriticOptions.critic_learning_rate.but(
        doc="Learning rate of the actor's and the critic's optimizers (or a schedule)."
    )
    _learning_rate_of = {"learning_rate": ("actor_optim", "critic_optim")}

    @property
    def actor_learning_rate(self) -> float:
        """``learning_rate`` (one rate serves both networks)."""
        return self.learning_rate

    @property
    def critic_learning_rate(self) -> float:
        """``learning_rate`` (one rate serves both networks)."""
        return self.learning_rate
