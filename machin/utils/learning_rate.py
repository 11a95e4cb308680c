"""Learning-rate schedules as functions of the step number."""

from __future__ import annotations

from numbers import Real
from typing import Any, Callable, List, Optional, Sequence, Tuple

__all__ = ["gen_learning_rate_func"]


def gen_learning_rate_func(
    lr_map: Sequence[Tuple[int, float]], logger: Optional[Any] = None
) -> Callable[[int], float]:
    """Build a piecewise-constant schedule from ``(first_step, value)`` pairs.

    ``[(0, 1e-3), (200000, 3e-4)]`` gives ``1e-3`` for ``0 <= step < 200000`` and
    ``3e-4`` from step ``200000`` on. Steps before the first entry get the first
    value.

    The function suits :class:`torch.optim.lr_scheduler.LambdaLR`, but note that
    ``LambdaLR`` multiplies the optimizer's initial learning rate by the returned
    value: give the optimizer ``lr=1.0`` to use the values as learning rates, or
    write multipliers into ``lr_map``.

    Args:
        lr_map: ``(step, value)`` pairs with strictly increasing steps.
        logger: When given, ``logger.info`` reports the value each time it changes
            (including the first call).

    Returns:
        ``lr_func(step) -> float``.

    Raises:
        ValueError: When ``lr_map`` is empty, an entry is not a ``(step, value)``
            pair of numbers, or the steps do not increase.
    """
    entries: List[Tuple[int, float]] = []
    for entry in lr_map:
        if (
            not isinstance(entry, (tuple, list))
            or len(entry) != 2
            or not isinstance(entry[0], Real)
            or not isinstance(entry[1], Real)
        ):
            raise ValueError(
                f"lr_map entries must be (step, learning_rate) number pairs, got {entry!r}"
            )
        entries.append((entry[0], float(entry[1])))
    if not entries:
        raise ValueError(
            "lr_map must hold at least one (step, learning_rate) pair, got an empty map"
        )
    steps = [step for step, _ in entries]
    if any(later <= earlier for earlier, later in zip(steps, steps[1:])):
        raise ValueError(f"the steps of lr_map must strictly increase, got {steps}")

    last_logged: List[Optional[float]] = [None]

    def lr_func(step: int) -> float:
        value = entries[0][1]
        for first_step, lr in entries:
            if step >= first_step:
                value = lr
            else:
                break
        if logger is not None and last_logged[0] != value:
            last_logged[0] = value
            logger.info(f"learning rate is {value} from step {step}")
        return value

    return lr_func
