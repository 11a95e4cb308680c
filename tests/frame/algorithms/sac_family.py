"""The Pendulum-v1 learning test of the SAC family (SAC, TQC, CrossQ, REDQ): the rule of
``loops.PENDULUM_RULE`` (a smoothed return, weight 0.5 on the past, above -400 in two
episodes in a row), the agent sampling its own actions."""

from __future__ import annotations

from typing import Any

from machin.frame.trainer import TrainResult

from .loops import PENDULUM_RULE, learns_pendulum

WARMUP_STEPS = 300


def learn_pendulum(
    agent: Any, name: str, episodes: int, warmup_steps: int = WARMUP_STEPS
) -> TrainResult:
    """Train a SAC-family ``agent`` on Pendulum-v1 (seed 0) sampling its own actions, until
    ``PENDULUM_RULE`` holds or ``episodes`` are played (see ``loops.learns_pendulum``)."""
    return learns_pendulum(
        agent, name, episodes=episodes, warmup_steps=warmup_steps, act_kwargs=None
    )


__all__ = ["PENDULUM_RULE", "learn_pendulum"]
