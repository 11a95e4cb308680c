"""Hindsight Experience Replay (HER): relabel a finished episode with goals it did reach.

Goal-conditioned environments (gymnasium-robotics' ``GoalEnv`` convention) observe a dict
with an ``observation``, the goal the agent has ``achieved_goal`` and the goal it was
given, ``desired_goal``, and offer a vectorised ``compute_reward(achieved_goal,
desired_goal, info)``. When an episode misses its goal, its sparse rewards teach
nothing; HER (Andrychowicz et al., 2017) stores the episode again as if one of the goals
it reached had been asked for, with the rewards recomputed for that goal.

:class:`HindsightReplay` does this before storing, so the relabelled transitions are
ordinary transitions: they go into the replay buffer through the algorithm's
``store_episode`` and every replay-based algorithm (DQN, DDPG, TD3, SAC, ...) learns from
them unchanged. Store each transition's state as the environment's dict of tensors
(``{"observation": [1, ...], "achieved_goal": [1, g], "desired_goal": [1, g]}``);
a goal-conditioned network then takes ``observation`` and ``desired_goal`` as keyword
arguments (see :func:`~machin.frame.algorithms.utils.safe_call`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from ..transition import TransitionBase

__all__ = ["HindsightReplay"]

STRATEGIES = ("future", "final", "episode")
#: The attribute of an algorithm that holds the generator of the HindsightReplay attached to it.
ATTACHED_GENERATOR = "hindsight_generator"
TERMINALS = ("keep", "never")


def _check_k(k: Any) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, (bool, np.bool_)) or k < 0:
        raise ValueError(
            f"k must be a non-negative integer (relabelled goals per transition), got {k!r}"
        )
    return int(k)


def _check_terminal(terminal: Any) -> Union[str, Callable]:
    if callable(terminal) or (isinstance(terminal, str) and terminal in TERMINALS):
        return terminal
    raise ValueError(
        f"terminal must be 'keep', 'never' or a callable (achieved_goal, desired_goal, info) -> "
        f"one flag per transition, got {terminal!r}"
    )


def _one_per_row(name: str, value: Any, rows: int) -> np.ndarray:
    """``value`` (what ``name`` returned for ``rows`` transitions) as a flat array of ``rows`` values."""
    array = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
    if array.shape not in ((rows,), (rows, 1)):
        raise ValueError(
            f"{name} must return one value per transition, an array of shape ({rows},), "
            f"for the {rows} relabelled transitions it was given; got shape {array.shape}"
        )
    return array.reshape(rows)


def _like(original: Any, value: Any) -> Any:
    """``value`` in the form of ``original``: a tensor of its shape and dtype, or a Python scalar."""
    if isinstance(original, torch.Tensor):
        return torch.full_like(original, value.item() if isinstance(value, np.generic) else value)
    if isinstance(original, (bool, np.bool_)):
        return bool(value)
    return float(value)


class HindsightReplay:
    """Turns a finished goal-conditioned episode into its transitions plus relabelled copies.

    Each relabelled copy of a transition replaces ``desired_goal`` in its ``state`` and
    ``next_state`` by a goal the episode achieved: the ``achieved_goal`` of the
    ``next_state`` of step ``j``, where ``j`` is chosen by ``strategy`` (for the
    transition of step ``t`` of an episode of ``T`` steps):

    * ``"future"``: ``j`` drawn uniformly from ``t .. T - 1`` (the step itself included,
      as Stable-Baselines3 does), ``k`` copies per transition;
    * ``"final"``: ``j = T - 1``, one copy per transition (none when ``k`` is 0: more
      copies of the same goal would be identical);
    * ``"episode"``: ``j`` drawn uniformly from ``0 .. T - 1``, ``k`` copies per transition.

    The copy's reward is ``compute_reward(next_state achieved_goal, new goal, info)``,
    computed in one vectorised call for the whole episode. Every other attribute
    (observation, action, custom attributes) is the original's.

    Terminal flags of the copies (``terminal``): ``"keep"`` (the default) copies each
    transition's own flag, which is right for environments whose episodes end on a time
    limit (the gymnasium-robotics tasks: their flags are all ``False``), or on events that
    do not depend on the goal. ``"never"`` marks every copy non-terminal, so each copy
    bootstraps from its next state. A callable ``terminal(achieved_goal, desired_goal,
    info)`` (vectorised like ``compute_reward``, one flag per row) decides each copy's
    flag from its new goal: use it for environments that end an episode when the goal
    is reached. The original transitions always keep their flags.

    Args:
        compute_reward: ``compute_reward(achieved_goal, desired_goal, info)``: numpy arrays
            ``[N, ...]`` of goals and an object array of ``N`` info dicts in, ``N``
            rewards out (shape ``[N]`` or ``[N, 1]``), as a gymnasium ``GoalEnv`` offers.
        strategy: ``"future"``, ``"final"`` or ``"episode"``.
        k: Relabelled copies per transition (4 as in the paper and Stable-Baselines3;
            0 stores the episode unchanged).
        terminal: ``"keep"``, ``"never"`` or a callable, see above.
        achieved_goal: State key of the achieved goal.
        desired_goal: State key of the desired goal.
        info_key: Custom attribute of the transitions that holds the environment's info
            dict, handed to ``compute_reward``; transitions without it give ``{}``.
        generator: ``torch.Generator`` (on the CPU) the goals are drawn with, for
            repeatable runs; the global torch generator otherwise. It is saved and
            resumed with the algorithm it stores into (see :meth:`attach`).

    Raises:
        ValueError: For an unknown ``strategy`` or ``terminal``, or a negative ``k``.
        TypeError: When ``compute_reward`` is not callable or ``generator`` is not a
            ``torch.Generator``.
    """

    def __init__(
        self,
        compute_reward: Callable[[np.ndarray, np.ndarray, Any], Any],
        strategy: str = "future",
        k: int = 4,
        *,
        terminal: Union[str, Callable[[np.ndarray, np.ndarray, Any], Any]] = "keep",
        achieved_goal: str = "achieved_goal",
        desired_goal: str = "desired_goal",
        info_key: str = "info",
        generator: Optional[torch.Generator] = None,
    ):
        if not callable(compute_reward):
            raise TypeError(
                f"compute_reward must be callable as compute_reward(achieved_goal, desired_goal, info), "
                f"got {type(compute_reward).__name__} {compute_reward!r}"
            )
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}"
            )
        self.compute_reward = compute_reward
        self.strategy = strategy
        self.k = _check_k(k)
        self.terminal = _check_terminal(terminal)
        self.achieved_goal = achieved_goal
        self.desired_goal = desired_goal
        self.info_key = info_key
        self.generator = generator

    def attach(self, framework: Any) -> None:
        """Make ``generator`` part of ``framework``'s run state, so that a resumed run
        draws the goals the interrupted run would have drawn.

        :meth:`~machin.frame.algorithms.base.TorchFramework.save_state` saves every
        ``torch.Generator`` among the algorithm's attributes and
        :meth:`~machin.frame.algorithms.base.TorchFramework.resume` restores it: the
        generator is kept as ``framework.hindsight_generator``. :meth:`store_episode`
        attaches by itself; in the resumed process, attach the new ``HindsightReplay``
        (built as before) before calling ``framework.resume``, which needs the attribute
        to restore the saved generator into. Without a generator of its own, the goals
        come from the global torch generator, which ``save_state`` saves anyway, and
        nothing is attached.

        Args:
            framework: The algorithm the relabelled episodes are stored into.

        Raises:
            ValueError: When ``framework.hindsight_generator`` already holds something
                other than this object's generator (another ``HindsightReplay``'s).
        """
        if self.generator is None:
            return
        current = getattr(framework, ATTACHED_GENERATOR, None)
        if current is not None and current is not self.generator:
            raise ValueError(
                f"{type(framework).__name__}.{ATTACHED_GENERATOR} already holds "
                f"{type(current).__name__} {current!r}, not this HindsightReplay's generator: "
                f"one algorithm saves the generator of one HindsightReplay; share it, or give the "
                f"others generator=None (the global torch generator, saved with every run state)"
            )
        setattr(framework, ATTACHED_GENERATOR, self.generator)

    @property
    def copies(self) -> int:
        """Relabelled copies made of each transition (``k``; at most 1 for ``"final"``)."""
        return min(self.k, 1) if self.strategy == "final" else self.k

    def goal_indices(self, length: int) -> torch.Tensor:
        """Draw the steps whose achieved goals relabel an episode of ``length`` steps.

        Args:
            length: Number of steps ``T`` of the episode.

        Raises:
            ValueError: When ``length`` is not a non-negative integer.

        Returns:
            An int64 tensor ``[T, copies]``: row ``t`` holds, for each copy of the
            transition of step ``t``, the step ``j`` whose ``next_state`` achieved goal
            becomes the copy's desired goal.
        """
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise ValueError(f"length must be a non-negative integer, got {length!r}")
        copies = self.copies
        if self.strategy == "final":
            return torch.full((length, copies), length - 1, dtype=torch.int64)
        uniform = torch.rand((length, copies), generator=self.generator, dtype=torch.float64)
        if self.strategy == "episode":
            first = torch.zeros(length, 1, dtype=torch.int64)
        else:
            first = torch.arange(length, dtype=torch.int64).view(length, 1)
        index = first + (uniform * (length - first)).long()
        return index.clamp_max(length - 1)

    def relabel(
        self, episode: Sequence[Union[TransitionBase, Dict[str, Any]]]
    ) -> List[Union[TransitionBase, Dict[str, Any]]]:
        """The episode's transitions followed by their relabelled copies.

        The originals are returned as they are (the same objects, first, in order); the
        copies are dicts, ordered by step and then by copy (``copies`` per step). They
        share the tensors of the episode; nothing of the episode is modified.

        Args:
            episode: The finished episode's transitions (``Transition`` objects or dicts
                with ``state``, ``action``, ``next_state``, ``reward`` and ``terminal``),
                oldest first.

        Raises:
            ValueError: When a transition lacks an attribute or a goal key, its goals
                differ in shape, or ``compute_reward`` (or a ``terminal`` callable) does
                not return one value per relabelled transition.
            TypeError: When an element of ``episode`` is neither a transition nor a dict.
        """
        episode = list(episode)
        steps = [self._read(transition, i) for i, transition in enumerate(episode)]
        if not steps or self.copies == 0:
            return episode
        achieved = [step["next_state"][self.achieved_goal] for step in steps]
        goals = torch.cat([goal.detach() for goal in achieved]).cpu().numpy()
        index = self.goal_indices(len(steps))
        rows = torch.arange(len(steps)).repeat_interleave(self.copies).tolist()
        chosen = index.view(-1).tolist()
        infos = np.empty(len(rows), dtype=object)
        for i, r in enumerate(rows):  # one by one: numpy would unpack infos that are sequences
            infos[i] = steps[r].get(self.info_key, {})
        reward = _one_per_row(
            "compute_reward", self.compute_reward(goals[rows], goals[chosen], infos), len(rows)
        )
        terminal = self._terminals(steps, rows, goals[rows], goals[chosen], infos)
        return episode + [
            self._copy(steps[r], achieved[j], reward[i], terminal[i])
            for i, (r, j) in enumerate(zip(rows, chosen))
        ]

    def store_episode(
        self, framework: Any, episode: Sequence[Union[TransitionBase, Dict[str, Any]]]
    ) -> int:
        """Store ``episode`` and its relabelled copies through ``framework.store_episode``, in one write.

        ``generator`` is :meth:`attach`-ed to ``framework`` first, so that the algorithm's
        ``save_state`` saves it.

        Args:
            framework: A replay-based algorithm (DQN, DDPG, TD3, SAC, ...) with ``n_step=1``.
            episode: The finished episode, see :meth:`relabel`.

        Returns:
            The number of transitions stored.

        Raises:
            ValueError: When ``framework`` learns from n-step returns (a relabelled copy
                is a one-step transition: the steps around it were not relabelled with
                its goal), as :meth:`attach` does, or as :meth:`relabel` does.
        """
        n_step = getattr(framework, "n_step", 1)
        if n_step != 1:
            raise ValueError(
                f"HindsightReplay stores one-step transitions, but {type(framework).__name__} has "
                f"n_step={n_step!r}: use n_step=1 with hindsight relabelling"
            )
        self.attach(framework)
        transitions = self.relabel(episode)
        framework.store_episode(transitions)
        return len(transitions)

    # -- the pieces of relabel ----------------------------------------------------------
    def _read(self, transition: Any, index: int) -> Dict[str, Any]:
        """The attributes of ``episode[index]`` as a dict, checked for what relabelling reads."""
        if isinstance(transition, TransitionBase):
            values = dict(transition.items())
        elif isinstance(transition, dict):
            values = transition
        else:
            raise TypeError(
                f"episode[{index}] must be a Transition or a dict, got {type(transition).__name__}"
            )
        for name in ("state", "action", "next_state", "reward", "terminal"):
            if name not in values:
                raise ValueError(
                    f"episode[{index}] has no attribute {name!r}; it has {sorted(values)}"
                )
        needed = {
            "state": [self.desired_goal],
            "next_state": [self.achieved_goal, self.desired_goal],
        }
        for name, keys in needed.items():
            major = values[name]
            for key in keys:
                if not isinstance(major, dict) or not isinstance(major.get(key), torch.Tensor):
                    found = sorted(major) if isinstance(major, dict) else type(major).__name__
                    raise ValueError(
                        f"episode[{index}].{name} needs a tensor under the key {key!r} (the goal "
                        f"keys are achieved_goal={self.achieved_goal!r}, desired_goal="
                        f"{self.desired_goal!r}); it has {found}"
                    )
        achieved = values["next_state"][self.achieved_goal]
        desired = values["state"][self.desired_goal]
        if achieved.shape != desired.shape:
            raise ValueError(
                f"episode[{index}]: next_state[{self.achieved_goal!r}] has shape {list(achieved.shape)}, "
                f"but state[{self.desired_goal!r}] has shape {list(desired.shape)}; an achieved goal "
                f"must have the shape of a desired goal to replace it"
            )
        return values

    def _terminals(
        self,
        steps: List[Dict[str, Any]],
        rows: List[int],
        achieved: np.ndarray,
        desired: np.ndarray,
        infos: np.ndarray,
    ) -> List[Any]:
        """One terminal flag per relabelled copy, as ``terminal`` says."""
        if self.terminal == "keep":
            return [steps[r]["terminal"] for r in rows]
        if self.terminal == "never":
            return [_like(steps[r]["terminal"], False) for r in rows]
        flags = _one_per_row("terminal", self.terminal(achieved, desired, infos), len(rows))
        return [_like(steps[r]["terminal"], bool(flag)) for r, flag in zip(rows, flags)]

    def _copy(
        self, step: Dict[str, Any], goal: torch.Tensor, reward: Any, terminal: Any
    ) -> Dict[str, Any]:
        """A copy of ``step`` with ``goal`` as its desired goal, and the given reward and terminal."""
        goal = goal.to(step["state"][self.desired_goal].dtype)
        copy = dict(step)
        copy["state"] = {**step["state"], self.desired_goal: goal}
        copy["next_state"] = {**step["next_state"], self.desired_goal: goal}
        copy["reward"] = _like(step["reward"], reward)
        copy["terminal"] = terminal
        return copy
