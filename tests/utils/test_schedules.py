"""Schedules of training progress: values, end fractions, floors, application to attributes, errors."""

import math

import pytest
import torch

from machin.frame.algorithms.options import positive, probability
from machin.utils.schedules import (
    ConstantSchedule,
    ExponentialSchedule,
    FunctionSchedule,
    LinearSchedule,
    Schedule,
    ScheduledValues,
    apply_schedules,
    as_schedule,
    check_progress,
    set_learning_rate,
)


# -- values ----------------------------------------------------------------------------------
def test_constant_schedule():
    schedule = ConstantSchedule(0.2)
    assert [schedule(p) for p in (0, 0.3, 1)] == [0.2, 0.2, 0.2]
    assert ConstantSchedule(3).constant == 3.0 and isinstance(ConstantSchedule(3)(0.5), float)


@pytest.mark.parametrize(
    "progress, expected",
    [
        (0.0, 1.0),
        (0.04, 0.76),
        (0.08, 0.52),
        (0.12, 0.28),
        (0.16, 0.04),
        (0.5, 0.04),
        (1.0, 0.04),
    ],
)
def test_linear_schedule_reaches_its_end_at_end_fraction_and_stays(progress, expected):
    # the zoo's DQN epsilon: 1 -> 0.04 over the first 16 % of training
    assert LinearSchedule(1.0, 0.04, 0.16)(progress) == pytest.approx(expected)


def test_linear_schedule_over_the_whole_run_and_upwards():
    decay = LinearSchedule(3e-4, 0.0)  # the zoo's "lin_3e-4"
    assert [decay(p) for p in (0, 0.25, 0.5, 1)] == pytest.approx([3e-4, 2.25e-4, 1.5e-4, 0.0])
    rise = LinearSchedule(-1, 1, end_fraction=0.5)
    assert [rise(p) for p in (0, 0.25, 0.5, 0.75)] == pytest.approx([-1, 0, 1, 1])


def test_exponential_schedule_is_geometric_with_a_floor():
    schedule = ExponentialSchedule(1.0, 0.01, end_fraction=0.5)
    assert (
        schedule(0) == 1.0
        and schedule(0.25) == pytest.approx(0.1)
        and schedule(0.5) == pytest.approx(0.01)
    )
    assert schedule(0.75) == 0.01 and schedule(1) == 0.01  # the floor
    # equal steps of progress multiply by the same factor
    values = [schedule(p) for p in (0.0, 0.1, 0.2, 0.3, 0.4)]
    ratios = [b / a for a, b in zip(values, values[1:])]
    assert ratios == pytest.approx([0.01**0.2] * 4)
    # the documented equivalence with a per-step decay: 1000 steps, factor d, floor f
    d, f, total = 0.995, 0.05, 1000
    fraction = min(1.0, math.log(f / 1.0) / (total * math.log(d)))
    per_step = ExponentialSchedule(1.0, f, end_fraction=fraction)
    for step in (0, 100, 400, 597, 900):
        assert per_step(step / total) == pytest.approx(max(f, d**step))
    # negative values work too; growth toward a ceiling
    assert ExponentialSchedule(-2.0, -8.0)(0.5) == pytest.approx(-4.0)
    assert ExponentialSchedule(0.1, 10.0)(0.5) == pytest.approx(1.0)


def test_function_schedules_and_as_schedule():
    linear = LinearSchedule(1, 0)
    assert as_schedule(linear) is linear
    constant = as_schedule(5)
    assert isinstance(constant, ConstantSchedule) and constant(0.7) == 5.0
    sb3_style = lambda remaining: 0.1 * remaining  # noqa: E731 (called with the progress remaining)
    schedule = as_schedule(lambda progress: sb3_style(1 - progress))
    assert isinstance(schedule, FunctionSchedule) and schedule(0.0) == pytest.approx(0.1)
    assert schedule(0.75) == pytest.approx(0.025)
    assert (
        as_schedule(lambda p: torch.tensor(p * 2))(0.25) == 0.5
    )  # a one-element tensor is read as a number
    with pytest.raises(
        TypeError, match=r"must return a real number, got 'x' of type str at progress 0.5"
    ):
        as_schedule(lambda p: "x")(0.5)


# -- progress and constructor errors ----------------------------------------------------------
@pytest.mark.parametrize(
    "schedule",
    [
        ConstantSchedule(1),
        LinearSchedule(1, 0),
        ExponentialSchedule(1, 0.1),
        FunctionSchedule(lambda p: p),
    ],
)
@pytest.mark.parametrize(
    "progress, error, message",
    [
        (
            -0.01,
            ValueError,
            r"progress must be in \[0, 1\] \(0: start of training, 1: end\), got -0.01",
        ),
        (1.5, ValueError, r"progress must be in \[0, 1\].*got 1.5"),
        (float("nan"), ValueError, r"progress must be in \[0, 1\].*got nan"),
        ("0.5", TypeError, r"progress must be a real number in \[0, 1\], got '0.5' of type str"),
        (True, TypeError, r"progress must be a real number .* got True of type bool"),
    ],
)
def test_progress_outside_the_unit_interval_is_refused(schedule, progress, error, message):
    with pytest.raises(error, match=message):
        schedule(progress)


def test_check_progress_accepts_the_ends_and_integers():
    assert check_progress(0) == 0.0 and check_progress(1) == 1.0 and check_progress(0.25) == 0.25


@pytest.mark.parametrize(
    "make, error, message",
    [
        (
            lambda: ConstantSchedule("1"),
            TypeError,
            "constant must be a finite real number, got '1' of type str",
        ),
        (
            lambda: ConstantSchedule(math.inf),
            TypeError,
            "constant must be a finite real number, got inf",
        ),
        (
            lambda: LinearSchedule(None, 0),
            TypeError,
            "start must be a finite real number, got None of type NoneType",
        ),
        (
            lambda: LinearSchedule(1, float("nan")),
            TypeError,
            "end must be a finite real number, got nan",
        ),
        (
            lambda: LinearSchedule(1, 0, 0),
            ValueError,
            r"end_fraction must be a number in \(0, 1\], got 0",
        ),
        (
            lambda: LinearSchedule(1, 0, 1.2),
            ValueError,
            r"end_fraction must be a number in \(0, 1\], got 1.2",
        ),
        (
            lambda: ExponentialSchedule(1, 0),
            ValueError,
            "needs start and end non-zero and of the same sign, got start=1.0, end=0.0 .*use LinearSchedule",
        ),
        (lambda: ExponentialSchedule(-1, 1), ValueError, "same sign, got start=-1.0, end=1.0"),
        (
            lambda: ExponentialSchedule(1, 0.5, end_fraction=-0.1),
            ValueError,
            r"end_fraction must be a number in \(0, 1\]",
        ),
        (lambda: FunctionSchedule(3), TypeError, "function must be callable, got 3 of type int"),
        (
            lambda: as_schedule("lin_0.1"),
            TypeError,
            r"schedule must be a number, a Schedule or a function of the progress in \[0, 1\], got 'lin_0.1' of type str",
        ),
        (
            lambda: as_schedule(True, "epsilon"),
            TypeError,
            "epsilon must be a number, a Schedule .* got True of type bool",
        ),
        (
            lambda: as_schedule(math.inf, "epsilon"),
            TypeError,
            "epsilon must be a finite real number, got inf",
        ),
    ],
)
def test_constructor_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_schedules_are_values():
    assert LinearSchedule(1, 0.04, 0.16) == LinearSchedule(1.0, 0.04, 0.16)
    assert (
        repr(LinearSchedule(1, 0.04, 0.16))
        == "LinearSchedule(start=1.0, end=0.04, end_fraction=0.16)"
    )
    with pytest.raises(AttributeError):
        LinearSchedule(1, 0).start = 2
    with pytest.raises(NotImplementedError):
        Schedule()(0.5)


# -- applying schedules to an object ----------------------------------------------------------
class Agent:
    epsilon = 1.0
    surrogate_loss_clip = 0.2


def test_apply_schedules_sets_checked_attributes():
    agent = Agent()
    values = apply_schedules(
        agent,
        0.08,
        {"epsilon": LinearSchedule(1.0, 0.04, 0.16), "surrogate_loss_clip": 0.1},
        {"epsilon": probability},
    )
    assert values == pytest.approx({"epsilon": 0.52, "surrogate_loss_clip": 0.1})
    assert agent.epsilon == pytest.approx(0.52) and agent.surrogate_loss_clip == 0.1
    apply_schedules(agent, 1.0, {"epsilon": LinearSchedule(1.0, 0.04, 0.16)})
    assert agent.epsilon == pytest.approx(0.04)


def test_a_rejected_value_names_the_attribute_and_changes_nothing():
    agent = Agent()
    scheduled = ScheduledValues(
        {"epsilon": LinearSchedule(0.5, 0.0), "surrogate_loss_clip": LinearSchedule(0.2, 0.0)},
        {"epsilon": probability, "surrogate_loss_clip": positive},
    )
    assert scheduled.apply(agent, 0.5) == pytest.approx(
        {"epsilon": 0.25, "surrogate_loss_clip": 0.1}
    )
    with pytest.raises(
        ValueError,
        match=r"surrogate_loss_clip must be positive, got 0.0 \(the value of its schedule "
        r"LinearSchedule\(start=0.2, end=0.0, end_fraction=1.0\) at progress 1.0\)",
    ):
        scheduled.apply(agent, 1.0)
    assert agent.epsilon == pytest.approx(0.25) and agent.surrogate_loss_clip == pytest.approx(
        0.1
    )  # untouched
    with pytest.raises(ValueError, match=r"progress must be in \[0, 1\]"):
        scheduled.values(2)


def test_checks_may_convert_the_value():
    agent = Agent()
    apply_schedules(
        agent,
        0.5,
        {"epsilon": LinearSchedule(10, 0)},
        {"epsilon": lambda name, value: round(value)},
    )
    assert agent.epsilon == 5


@pytest.mark.parametrize(
    "schedules, checks, error, message",
    [
        (
            [("epsilon", 1.0)],
            None,
            TypeError,
            "schedules must be a mapping of attribute names to schedules, got list",
        ),
        ({1: 1.0}, None, TypeError, "schedules must be keyed by attribute names, got the key 1"),
        (
            {"epsilon": "fast"},
            None,
            TypeError,
            r"schedules\['epsilon'\] must be a number, a Schedule or a function",
        ),
        (
            {"epsilon": 1.0},
            {"epsilon": 3},
            TypeError,
            r"checks\['epsilon'\] must be callable as check\(name, value\)",
        ),
        ({"epsilon": 1.0}, [probability], TypeError, "checks must be a mapping .* got list"),
        (
            {"epsilon": 1.0},
            {"epsilom": probability},
            ValueError,
            r"checks names \['epsilom'\], which have no schedule; the schedules are \['epsilon'\]",
        ),
    ],
)
def test_scheduled_values_errors(schedules, checks, error, message):
    with pytest.raises(error, match=message):
        ScheduledValues(schedules, checks)


def test_set_learning_rate_sets_every_parameter_group():
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(
        [{"params": first.parameters()}, {"params": second.parameters(), "lr": 0.1}], lr=1e-3
    )
    set_learning_rate(optimizer, LinearSchedule(3e-4, 0.0)(0.5))
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([1.5e-4, 1.5e-4])
    with pytest.raises(ValueError, match="learning_rate must be non-negative, got -1.0"):
        set_learning_rate(optimizer, -1)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer, got Linear"):
        set_learning_rate(first, 0.1)
