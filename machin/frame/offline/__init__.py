"""Offline reinforcement learning: datasets into buffers, and evaluating what was learned.

* :mod:`~machin.frame.offline.datasets`: :func:`load_minari` (Minari datasets),
  :func:`load_episodes` (episode dicts), :func:`save_experience` /
  :func:`load_experience` (the transitions of a machin run);
* :mod:`~machin.frame.offline.evaluation`: :func:`evaluate_policy`, which plays a learned
  policy in an environment.

The offline algorithms themselves (BC, TD3+BC, ...) live with the others in
:mod:`machin.frame.algorithms`.
"""

from .datasets import (
    EPISODE_KEYS,
    DatasetError,
    load_episodes,
    load_experience,
    load_minari,
    save_experience,
)
from .evaluation import eval_act_method, evaluate_policy

__all__ = [
    "DatasetError",
    "EPISODE_KEYS",
    "load_minari",
    "load_episodes",
    "save_experience",
    "load_experience",
    "evaluate_policy",
    "eval_act_method",
]
