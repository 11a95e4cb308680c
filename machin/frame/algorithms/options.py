"""Constructor options, declared once per concept and inherited by every algorithm.

An algorithm class declares each keyword option of its constructor as a class attribute::

    class DDPG(ReplayMixin, TorchFramework):
        update_rate = Option(0.001, unit_interval, "Soft target update rate tau.")

        def __init__(self, actor, actor_target, critic, critic_target, optimizer, criterion):
            ...  # reads self.update_rate, self.batch_size, ... already checked

    class DDPGPer(PrioritizedReplayMixin, DDPG):
        update_rate = DDPG.update_rate.but(default=0.005)  # all that differs

Options are collected along the MRO (the options of ``TorchFramework``, of the
mixins and of every base), so a subclass lists only what it adds or changes. Before
the constructor body runs, every option is checked (its check raises ``TypeError`` /
``ValueError`` naming it) and stored as an instance attribute of its name. The
constructor's signature (``inspect.signature``, ``help()``) shows every option with
its default as a keyword argument after ``*_`` and, as in Machin 0.3.4, extra
positional and keyword arguments are accepted and ignored with an
:class:`~machin.utils.compat.ExtraArgumentsWarning`.
"""

from __future__ import annotations

import inspect
import numbers
from typing import Any, Callable, Dict, Optional, Tuple

from ...utils.compat import drop_extra_args

__all__ = [
    "Option",
    "AttributeOption",
    "option_specs",
    "install_options",
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


def _real(name: str, value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {value!r} of type {type(value).__name__}")


def _integer(name: str, value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, got {value!r} of type {type(value).__name__}")


def real(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number; return it (errors name the option ``name``)."""
    _real(name, value, "a real number")
    return value


def positive(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number above 0 (``inf`` allowed); return it (errors name the option ``name``)."""
    _real(name, value, "a positive real number")
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return value


def positive_int(name: str, value: Any) -> Any:
    """Check that ``value`` is an integer above 0; return it (errors name the option ``name``)."""
    _integer(name, value, "a positive integer")
    if not value > 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def non_negative(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number of at least 0; return it (errors name the option ``name``)."""
    _real(name, value, "a non-negative real number")
    if not value >= 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return value


def non_negative_int(name: str, value: Any) -> Any:
    """Check that ``value`` is an integer of at least 0; return it (errors name the option ``name``)."""
    _integer(name, value, "a non-negative integer")
    if not value >= 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def unit_interval(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number in ``(0, 1]`` (a rate or a decay factor); return it (errors name the option ``name``)."""
    _real(name, value, "a real number in (0, 1]")
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return value


def probability(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number in ``[0, 1]`` (a discount, a lambda); return it (errors name the option ``name``)."""
    _real(name, value, "a real number in [0, 1]")
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
            raise TypeError(str(error).replace(f"{name} must be ", f"{name} must be None or ", 1)) from None

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
    """One keyword option of an algorithm's constructor.

    An option stored as an attribute (the default) stays checked: assigning
    ``algorithm.<name> = value`` later runs the same check. A *schedulable* option also
    takes a schedule (a callable of the training progress, see
    :mod:`machin.utils.schedules`) instead of a number: the attribute then holds the
    schedule's value, which :meth:`~machin.frame.algorithms.base.TorchFramework.set_progress`
    moves along (and checks) as training goes on.

    Args:
        default: The value used when the caller does not pass the option.
        check: ``check(name, value) -> value``: raises ``TypeError`` / ``ValueError`` for a
            bad value, returns the value to store. ``None``: any value.
        doc: One sentence for the constructor's documentation.
        attribute: Store the value as an instance attribute of the option's name
            (``False`` for options that only configure construction, e.g. ``replay_buffer``;
            the constructor body reads them from ``self._option_values``, which is removed
            once construction ends).
        schedulable: Accept a schedule as well as a value. A value given or assigned is
            checked with ``check``; a schedule's values with ``schedule_check`` when given
            (e.g. a learning rate must be positive, but a schedule may decay it to 0).
    """

    __slots__ = ("name", "default", "check", "doc", "attribute", "schedulable", "schedule_check")

    def __new__(cls, *args: Any, attribute: bool = True, **kwargs: Any):
        if cls is Option and attribute:
            cls = AttributeOption
        return super().__new__(cls)

    def __init__(self, default: Any, check: Optional[Check] = None, doc: str = "", *, attribute: bool = True,
                 schedulable: bool = False, schedule_check: Optional[Check] = None):
        self.name = ""
        self.default = default
        self.check = check
        self.doc = doc
        self.attribute = attribute
        self.schedulable = schedulable
        self.schedule_check = schedule_check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def but(self, **changes: Any) -> Option:
        """A copy with some fields changed, e.g. ``DDPG.update_rate.but(default=0.005)``."""
        fields = {k: getattr(self, k) for k in ("default", "check", "doc", "attribute", "schedulable",
                                                "schedule_check")}
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Option.but() got unknown field(s) {sorted(unknown)}; fields are {sorted(fields)}")
        fields.update(changes)
        default, check, doc = fields.pop("default"), fields.pop("check"), fields.pop("doc")
        return Option(default, check, doc, **fields)

    def __repr__(self) -> str:
        return f"Option({self.name}={self.default!r})"


class AttributeOption(Option):
    """An option kept as a checked instance attribute (what ``Option(...)`` makes by default).

    Only assigning goes through the option (``__set__`` checks the value, then stores it in
    the instance's ``__dict__`` under the option's name). It has no ``__get__``, so reading
    ``algorithm.<name>`` is a plain instance-dictionary read: no Python call on the hot
    paths, and nothing for ``torch.compile`` to trace in a compiled step (before 2.13 it
    cannot trace a descriptor's ``__get__`` that reads the instance's ``__dict__``). On the
    class, the name still gives the option itself (``DQN.discount``).
    """

    __slots__ = ()

    def __set__(self, instance: Any, value: Any) -> None:
        schedules = instance.__dict__.setdefault("_schedules", {})
        if self.schedulable and callable(value) and not isinstance(value, numbers.Number):
            schedules[self.name] = value
            self.assign(instance, value(instance.__dict__.get("_progress", 0.0)), scheduled=True)
        else:
            schedules.pop(self.name, None)
            self.assign(instance, value)

    def assign(self, instance: Any, value: Any, scheduled: bool = False) -> None:
        """Check ``value`` and store it as the option of ``instance``.

        ``scheduled``: the value comes from a schedule (checked with ``schedule_check``;
        the schedule is kept).
        """
        check = (self.schedule_check or self.check) if scheduled else self.check
        if check is not None:
            value = check(self.name, value)
        instance.__dict__[self.name] = value
        changed = getattr(instance, "_option_changed", None)
        if changed is not None:
            changed(self.name, value)


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


_RESOLVED = "_option_values"
_CONSTRUCTING = "_constructing_options"


def _positional_names(fn: Callable) -> Tuple[str, ...]:
    params = list(inspect.signature(fn).parameters.values())[1:]  # drop self
    for p in params:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY):
            raise TypeError(
                f"{fn.__qualname__} declares {p.name!r} as {p.kind.description}: an option-taking constructor "
                f"lists only its positional arguments (networks, optimizer, ...); declare options as Option "
                f"class attributes"
            )
    return tuple(p.name for p in params)


def _options_doc(specs: Dict[str, Option]) -> str:
    lines = ["Keyword options (checked before construction, stored as attributes of their names):", ""]
    for spec in specs.values():
        lines.append(f"    {spec.name} (default ``{spec.default!r}``): {spec.doc}".rstrip())
    return "\n".join(lines)


def _store(self: Any, specs: Dict[str, Option], given: Dict[str, Any]) -> None:
    """Check the ``given`` values and store them (as attributes, or in ``_option_values``)."""
    values = self.__dict__.setdefault(_RESOLVED, {})
    for name, value in given.items():
        spec = specs[name]
        if spec.attribute:
            setattr(self, name, value)  # checked by the AttributeOption
            value = getattr(self, name)
        elif spec.check is not None:
            value = spec.check(name, value)
        values[name] = value


def _make_init(cls: type, body: Callable, specs: Dict[str, Option]) -> Callable:
    positional = _positional_names(body)
    accepted = frozenset(positional)
    option_names = frozenset(specs)

    def __init__(self, *args, **kwargs):
        specs_now = type(self)._option_specs
        if self.__dict__.get(_CONSTRUCTING):
            # An inner call: a subclass body calling super().__init__(networks, ...), perhaps
            # with options of its own choosing (a user's subclass written the 0.3.4 way).
            given = {k: kwargs.pop(k) for k in list(kwargs) if k in specs_now}
            if given:
                _store(self, specs_now, given)
            return body(self, *args, **kwargs)
        args, kwargs = drop_extra_args(f"{type(self).__name__}.__init__", args, kwargs, len(positional),
                                       accepted | option_names, stacklevel=2)
        self.__dict__[_RESOLVED] = {}
        self.__dict__[_CONSTRUCTING] = True
        try:
            _store(self, specs_now, {name: kwargs.get(name, spec.default) for name, spec in specs_now.items()})
            body(self, *args, **{k: v for k, v in kwargs.items() if k in accepted})
            self._after_init()
        finally:
            # Options are attributes now; the rest (e.g. a given replay_buffer) only served construction.
            del self.__dict__[_CONSTRUCTING]
            self.__dict__.pop(_RESOLVED, None)

    body_params = list(inspect.signature(body).parameters.values())
    params = body_params + [inspect.Parameter("_", inspect.Parameter.VAR_POSITIONAL)]
    params += [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=s.default) for s in specs.values()]
    params.append(inspect.Parameter("__", inspect.Parameter.VAR_KEYWORD))
    __init__.__signature__ = inspect.Signature(params)
    __init__.__doc__ = "\n\n".join(d for d in (inspect.cleandoc(body.__doc__ or ""), _options_doc(specs)) if d)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__._option_body = body
    __init__.__machin_ignores_extra_args__ = True
    return __init__


def install_options(cls: type) -> None:
    """Collect the options of ``cls`` and give it a constructor that checks and stores them.

    Called for every subclass of :class:`~machin.frame.algorithms.base.TorchFramework`. A
    class whose own ``__init__`` takes only positional arguments (networks, optimizer,
    ...) gets it wrapped; a class without its own ``__init__`` gets the inherited body
    wrapped with its own options and signature. A constructor written the Machin 0.3.4
    way (taking keywords, e.g. a user's subclass that passes ``**kwargs`` on to
    ``super().__init__``) is left as it is: the base constructor it calls resolves the
    options.
    """
    specs = option_specs(cls)
    cls._option_specs = specs
    # The constructor this class would run: its own, or the nearest inherited one.
    definer = next(k for k in cls.__mro__ if "__init__" in k.__dict__)
    init = definer.__dict__["__init__"]
    if hasattr(init, "_option_body"):
        body = init._option_body
    else:
        try:
            _positional_names(init)
        except TypeError:
            return  # a keyword-taking constructor (written the 0.3.4 way): leave it alone
        if definer is not cls:
            return
        body = init
    cls.__init__ = _make_init(cls, body, specs)


def _buffer(name: str, value: Any) -> Any:
    from ..buffers import Buffer

    if not isinstance(value, Buffer):
        raise TypeError(f"{name} must be a Buffer (or None for the default one), got {type(value).__name__}")
    return value


class BufferOptions:
    """The options of every algorithm that learns from batches drawn from a buffer."""

    batch_size = Option(100, positive_int, "Samples per update.")
    discount = Option(0.99, probability, "Discount factor gamma.")
    replay_size = Option(500000, positive_int, "Capacity of the default buffer.")
    replay_device = Option("cpu", doc="Device of the default buffer.")
    replay_buffer = Option(None, optional(_buffer), "A buffer to use instead of the default one "
                           "(``replay_size`` and ``replay_device`` are then not used).", attribute=False)


class ActorCriticOptions:
    """The learning rates of algorithms with an actor and critics."""

    actor_learning_rate = Option(0.0005, positive, "Learning rate of the actor optimizer (or a schedule).",
                                 schedulable=True, schedule_check=non_negative)
    critic_learning_rate = Option(0.001, positive, "Learning rate of the critic optimizer(s) (or a schedule).",
                                  schedulable=True, schedule_check=non_negative)
    _learning_rate_of = {"actor_learning_rate": ("actor_optim",),
                         "critic_learning_rate": ("critic_optim", "critic2_optim")}


class SoftTargetOptions:
    """The rate of soft target-network updates."""

    update_rate = Option(0.005, unit_interval, "Soft update rate tau: ``target = tau * online + (1 - tau) * target``.")


class OneLearningRate:
    """One ``learning_rate`` for the actor's and the critic's optimizers (Ape-X DDPG, IMPALA).

    Mixed in before the algorithm class, it replaces the two learning-rate options.
    """

    learning_rate = ActorCriticOptions.critic_learning_rate.but(
        doc="Learning rate of the actor's and the critic's optimizers (or a schedule).")
    _learning_rate_of = {"learning_rate": ("actor_optim", "critic_optim")}

    @property
    def actor_learning_rate(self) -> float:
        """``learning_rate`` (one rate serves both networks)."""
        return self.learning_rate

    @property
    def critic_learning_rate(self) -> float:
        """``learning_rate`` (one rate serves both networks)."""
        return self.learning_rate
