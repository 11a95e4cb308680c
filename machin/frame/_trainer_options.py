"""The checks of the :class:`~machin.frame.trainer.Trainer`'s options, one concern per function.

Each function checks a group of options that belong together, fills in the defaults that
depend on other options and returns what the trainer keeps; a bad option raises the
error documented by the trainer, naming the option, what it accepts and what it got.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ..utils.save_env import SaveEnv
from .algorithms.base import Driver
from .sampler import check_hidden_options

STORE_MODES = ("transition", "episode")


def check_number(
    name: str, value: Any, minimum: Optional[float] = None, integer: bool = False
) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``value`` is a number (an integer) ``>= minimum``."""
    kinds = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or (minimum is not None and value < minimum)
    ):
        kind = "an integer" if integer else "a number"
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{name} must be {kind}{bound}, got {value!r}")


@dataclass
class Acting:
    """How the trainer acts and stores: the exploring and the evaluation act methods, the store mode."""

    act_method: str
    act_kwargs: Dict[str, Any]
    eval_act_method: str
    eval_act_kwargs: Dict[str, Any]
    store: str


def _driver(
    framework: Any, act_method: Any, eval_act_method: Any, store: Any, hidden_key: Any
) -> Driver:
    """The driver the algorithm's class declares (inherited from its family), or an empty one."""
    driver = getattr(type(framework), "driver", None)
    if driver is None and None in (act_method, eval_act_method, store):
        reason = getattr(type(framework), "driver_unavailable", "it is not a machin algorithm")
        raise TypeError(
            f"Trainer has no defaults for {type(framework).__name__} ({reason}); give "
            f"act_method, eval_act_method and store"
        )
    if driver is not None and driver.needs_hidden and hidden_key is None:
        raise TypeError(
            f"{type(framework).__name__} acts with a recurrent network: give hidden_key and initial_hidden "
            f"(e.g. hidden_key='hidden', initial_hidden=torch.zeros(1, hidden_size))"
        )
    return driver or Driver("", {}, "", "")


def greedy_evaluation(framework: Any, eval_act_method: str) -> Dict[str, Any]:
    """The evaluation act keywords when none are given: ``{"deterministic": True}`` for a
    stochastic-policy algorithm evaluated with ``act`` whose actor takes ``deterministic``
    (its most likely action), else none (the policy is sampled, as in training)."""
    can = getattr(framework, "can_act_deterministically", None)
    if eval_act_method == "act" and callable(can) and can():
        return {"deterministic": True}
    return {}


def acting_options(
    framework: Any,
    act_method: Optional[str],
    act_kwargs: Optional[Dict[str, Any]],
    eval_act_method: Optional[str],
    eval_act_kwargs: Optional[Dict[str, Any]],
    store: Optional[str],
    hidden_key: Optional[str],
    initial_hidden: Any,
    state_key: str,
) -> Acting:
    """The act methods, their keyword arguments and the store mode, defaults from the family's driver.

    A given ``act_method`` drops the family's ``act_kwargs``; without ``eval_act_kwargs``,
    evaluation is greedy where it can be (:func:`greedy_evaluation`). The recurrent options
    are checked here too, as they change how every act call is made.
    """
    driver = _driver(framework, act_method, eval_act_method, store, hidden_key)
    check_hidden_options(hidden_key, initial_hidden, None, state_key)
    if act_kwargs is None:
        act_kwargs = driver.act_kwargs if act_method is None else {}
    eval_act_method = eval_act_method or driver.eval_act_method
    if eval_act_kwargs is None:
        eval_act_kwargs = greedy_evaluation(framework, eval_act_method)
    acting = Acting(
        act_method or driver.act_method,
        dict(act_kwargs),
        eval_act_method,
        dict(eval_act_kwargs),
        store or driver.store,
    )
    for name, method in (
        ("act_method", acting.act_method),
        ("eval_act_method", acting.eval_act_method),
    ):
        if not callable(getattr(framework, method, None)):
            raise ValueError(f"{name} {method!r} is not a method of {type(framework).__name__}")
    if acting.store not in STORE_MODES:
        raise ValueError(f"store must be 'transition' or 'episode', got {acting.store!r}")
    return acting


@dataclass
class Updates:
    """When ``update()`` is called (see the trainer's options of the same names)."""

    updates_per_step: float
    updates_per_episode: int
    train_freq: Optional[Tuple[int, str]]
    gradient_steps: Optional[int]
    rollout_steps: Optional[int]
    warmup_steps: int


def burst_options(
    train_freq: Any, gradient_steps: Any, updates_per_step: Any
) -> Tuple[Optional[Tuple[int, str]], Optional[int]]:
    """``(train_freq as (n, unit), gradient_steps)``, or ``(None, None)`` without bursts."""
    if train_freq is None and gradient_steps is None:
        return None, None
    if updates_per_step is not None:
        raise ValueError(
            f"give updates_per_step (even updates) or train_freq / gradient_steps (bursts), not both: got "
            f"updates_per_step={updates_per_step!r}, train_freq={train_freq!r}, gradient_steps={gradient_steps!r}"
        )
    if train_freq is None:
        train_freq = 1
    if (
        isinstance(train_freq, (tuple, list))
        and len(train_freq) == 2
        and train_freq[1] in ("step", "episode")
    ):
        count, unit = train_freq
    else:
        count, unit = train_freq, "step"
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(
            f"train_freq must be a positive integer (environment steps) or a pair (n, 'step') or "
            f"(n, 'episode') with n a positive integer, got {train_freq!r}"
        )
    if gradient_steps is None:
        gradient_steps = 1
    if (
        isinstance(gradient_steps, bool)
        or not isinstance(gradient_steps, int)
        or not (gradient_steps >= 1 or gradient_steps == -1)
    ):
        raise ValueError(
            f"gradient_steps must be a positive integer or -1 (as many as steps taken), "
            f"got {gradient_steps!r}"
        )
    return (count, unit), gradient_steps


def _check_rollout_options(rollout_steps: int, store: str, others: Dict[str, Any]) -> None:
    """``rollout_steps`` owns the update schedule and needs episode mode; ``others``: the schedule options."""
    check_number("rollout_steps", rollout_steps, minimum=1, integer=True)
    contradicting = [f"{name}={value!r}" for name, value in others.items() if value is not None]
    if contradicting:
        raise ValueError(
            f"rollout_steps makes one update per rollout: leave out updates_per_step, updates_per_episode, "
            f"train_freq, gradient_steps and warmup_steps, got rollout_steps={rollout_steps} with "
            f"{', '.join(contradicting)}"
        )
    if store != "episode":
        raise ValueError(
            f"rollout_steps stores each rollout with store_episode: it needs store='episode', "
            f"got store={store!r}"
        )


def update_options(
    store: str,
    updates_per_step: Optional[float],
    updates_per_episode: Optional[int],
    train_freq: Any,
    gradient_steps: Optional[int],
    rollout_steps: Optional[int],
    warmup_steps: int,
) -> Updates:
    """The update schedule, with the defaults of the store mode (see the trainer's options)."""
    episodic = store == "episode"
    check_number("warmup_steps", warmup_steps, minimum=0, integer=True)
    freq, gradient = burst_options(train_freq, gradient_steps, updates_per_step)
    if rollout_steps is not None:
        _check_rollout_options(
            rollout_steps,
            store,
            {
                "updates_per_step": updates_per_step,
                "updates_per_episode": updates_per_episode,
                "train_freq": train_freq,
                "gradient_steps": gradient_steps,
                "warmup_steps": warmup_steps or None,
            },
        )
        updates_per_step, updates_per_episode = 0.0, 0
    if updates_per_step is None:
        updates_per_step = 0.0 if episodic or freq is not None else 1.0
    check_number("updates_per_step", updates_per_step, minimum=0)
    if updates_per_episode is None:
        updates_per_episode = 1 if episodic and freq is None else 0
    check_number("updates_per_episode", updates_per_episode, minimum=0, integer=True)
    return Updates(
        float(updates_per_step), updates_per_episode, freq, gradient, rollout_steps, warmup_steps
    )


def evaluation_options(
    eval_interval: Optional[int], eval_every_steps: Optional[int], eval_episodes: int
) -> Tuple[int, int]:
    """``(eval_interval, eval_every_steps)`` with their defaults; they exclude each other."""
    if eval_every_steps is not None:
        check_number("eval_every_steps", eval_every_steps, minimum=0, integer=True)
    if eval_interval is None:
        eval_interval = 0 if eval_every_steps else 10
    check_number("eval_interval", eval_interval, minimum=0, integer=True)
    if eval_interval and eval_every_steps:
        raise ValueError(
            f"evaluate every eval_interval episodes or every eval_every_steps steps, not both: got "
            f"eval_interval={eval_interval} and eval_every_steps={eval_every_steps}"
        )
    check_number("eval_episodes", eval_episodes, minimum=1, integer=True)
    return eval_interval, eval_every_steps or 0


def check_run_options(
    smoothing: Any, solved_reward: Any, solved_repeat: Any, seed: Any, log_dir: Any, gif_env: Any
) -> None:
    """The early stop, the seed and the output options."""
    check_number("solved_repeat", solved_repeat, minimum=1, integer=True)
    if (
        isinstance(smoothing, bool)
        or not isinstance(smoothing, (int, float))
        or not 0 <= smoothing < 1
    ):
        raise ValueError(f"smoothing must be a number in [0, 1), got {smoothing!r}")
    if solved_reward is not None:
        check_number("solved_reward", solved_reward)
    if seed is not None:
        check_number("seed", seed, minimum=0, integer=True)
    if gif_env is not None and log_dir is None:
        raise ValueError("gif_env needs a log_dir to write episode.gif into, got log_dir=None")
    if log_dir is not None and not isinstance(log_dir, (str, os.PathLike, SaveEnv)):
        raise TypeError(f"log_dir must be a path, a SaveEnv or None, got {type(log_dir).__name__}")


def check_random_options(
    random_steps: Any, random_action: Any, group: bool, store: str, hidden_key: Optional[str]
) -> None:
    """Random first steps need one environment, transition mode and no recurrent state."""
    check_number("random_steps", random_steps, minimum=0, integer=True)
    if random_steps:
        why = None
        if group:
            why = "it needs a single environment, not a group"
        elif store == "episode":
            why = f"it needs store='transition' (random actions carry no log-probabilities), got {store!r}"
        elif hidden_key is not None:
            why = "a random action comes with no hidden state"
        if why:
            raise ValueError(f"random_steps plays random actions on one environment: {why}")
    elif random_action is not None:
        raise ValueError("random_action is only used with random_steps > 0, got random_steps=0")
    if random_action is not None and not callable(random_action):
        raise TypeError(
            f"random_action must be a function returning an action, got {type(random_action).__name__}"
        )


def check_group_options(
    obs_to_state: Any, eval_env: Any, eval_interval: int, eval_every_steps: int
) -> None:
    """A group of environments makes its own states and is never used for evaluation."""
    if obs_to_state is not None:
        raise ValueError(
            "obs_to_state only applies to a single environment: a group's sampler "
            "makes the state tensors itself (see VecSampler's state_dtype)"
        )
    if eval_env is None and (eval_interval or eval_every_steps):
        raise ValueError(
            f"a group of environments is not used for evaluation: give eval_env (one "
            f"environment or a function making one) or eval_interval=0, got eval_interval={eval_interval}"
            + (f" and eval_every_steps={eval_every_steps}" if eval_every_steps else "")
        )


def check_parts(callbacks: Any, evaluator: Any, loggers: Any, checkpointer: Any) -> None:
    """The replaceable parts must be :class:`~machin.frame.callbacks.Callback` objects."""
    from .callbacks import Callback, Evaluator

    if evaluator is not None and not isinstance(evaluator, Evaluator):
        raise TypeError(
            f"evaluator must be an Evaluator (or a subclass of it) or None, got "
            f"{type(evaluator).__name__}"
        )
    if checkpointer is not None and not isinstance(checkpointer, Callback):
        raise TypeError(
            f"checkpointer must be a Callback or None, got {type(checkpointer).__name__}"
        )
    for name, parts in (("callbacks", callbacks), ("loggers", loggers)):
        if parts is None:
            continue
        if isinstance(parts, Callback) or not isinstance(parts, (list, tuple)):
            raise TypeError(
                f"{name} must be a list of Callback objects or None, got {type(parts).__name__}"
            )
        for part in parts:
            if not isinstance(part, Callback):
                raise TypeError(
                    f"{name} must hold Callback objects, got {part!r} ({type(part).__name__})"
                )


def resume_problem(group_problem: Optional[str], seed: Optional[int]) -> Optional[str]:
    """Why runs with these options cannot be saved for an exact resume, or ``None`` when they can.

    ``group_problem`` is why the group of environments cannot be replayed (``None`` for a
    single environment or a group that can be).
    """
    if group_problem is not None:
        return f"it trains on a group of environments that cannot be saved: {group_problem}"
    if seed is None:
        return "it has no seed (give seed=..., so that the episode in progress can be replayed on resume)"
    return None


def check_save_options(
    save_every: Any, log_dir: Any, group_problem: Optional[str], seed: Optional[int]
) -> None:
    """``save_every`` needs a ``log_dir`` to save into and options that allow an exact resume."""
    if save_every is None:
        return
    check_number("save_every", save_every, minimum=1, integer=True)
    if log_dir is None:
        raise ValueError(
            f"save_every={save_every} saves into <log_dir>/saves: give log_dir, got log_dir=None"
        )
    why = resume_problem(group_problem, seed)
    if why is not None:
        raise ValueError(
            f"save_every={save_every} saves runs for an exact resume, which this trainer cannot: "
            f"{why}"
        )
