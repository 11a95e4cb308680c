"""A distributed buffer of whole episodes (IMPALA's learners sample episodes, not steps)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ...parallel.distributed.rpc_group import RpcGroup
from ..transition import Transition, TransitionBase
from .buffer_d import DistributedBuffer

__all__ = ["EPISODE_REQUIRED_ATTRS", "EpisodeTransition", "EpisodeDistributedBuffer"]

EPISODE_REQUIRED_ATTRS = ("state", "action", "next_state", "reward", "terminal", "action_log_prob")


class EpisodeTransition(Transition):
    """A whole episode in one record: the first dimension of every tensor counts the steps.

    Built like a :class:`~machin.frame.transition.Transition`, but tensors may have
    any common number of rows; or from a list of steps with :meth:`from_episode`.
    Custom attributes are never tensors (per-step values are kept as lists).
    """

    _required_batch_size = None

    @classmethod
    def from_episode(
        cls, episode: Sequence[Union[TransitionBase, Dict[str, Any]]]
    ) -> EpisodeTransition:
        """Join the steps of an episode (``Transition`` objects or dicts) into one record.

        State, action and next-state tensors are concatenated key by key; rewards and
        terminals become ``[T, 1]`` tensors; each custom attribute becomes the list of
        its per-step values.

        Raises:
            ValueError: When the episode is empty or its steps have different attributes.
        """
        episode = list(episode)
        if not episode:
            raise ValueError("episode must hold at least one transition, got an empty list")
        keys = sorted(episode[0].keys())
        for step, t in enumerate(episode):
            if sorted(t.keys()) != keys:
                raise ValueError(
                    f"every step of an episode must have the same attributes: step 0 has {keys}, "
                    f"step {step} has {sorted(t.keys())}"
                )
        missing = [
            name
            for name in ("state", "action", "next_state", "reward", "terminal")
            if name not in keys
        ]
        if missing:
            raise ValueError(
                f"the steps of the episode are missing required attribute(s) {missing}; they have {keys}"
            )

        def major(name: str) -> Dict[str, torch.Tensor]:
            return {k: torch.cat([t[name][k] for t in episode]) for k in episode[0][name]}

        def sub(name: str) -> torch.Tensor:
            values = [t[name] for t in episode]
            if isinstance(values[0], torch.Tensor):
                return torch.cat([v.reshape(1, -1) for v in values])
            dtype = torch.bool if name == "terminal" else torch.get_default_dtype()
            return torch.tensor([[float(v)] for v in values], dtype=dtype)

        custom = {
            name: [t[name] for t in episode]
            for name in keys
            if name not in ("state", "action", "next_state", "reward", "terminal")
        }
        return cls(
            major("state"),
            major("action"),
            major("next_state"),
            sub("reward"),
            sub("terminal"),
            **custom,
        )


class EpisodeDistributedBuffer(DistributedBuffer):
    """A distributed buffer whose entries are whole episodes (:class:`EpisodeTransition`).

    Each member keeps up to ``buffer_size`` episodes (the oldest are overwritten);
    appending is local, so a sampler must be a member of ``group``. Sampling picks
    episodes across the group, without replacement, in proportion to each member's
    number of episodes (every episode with ``sample_method="all"``), and returns
    ``(count, ([episodes],))``. Data stays on the CPU.

    Args:
        buffer_name: Name of the buffer, unique in ``group``.
        group: The RPC group whose members hold the parts.
        buffer_size: Maximum number of episodes of the **local** part.
        generator: Optional ``torch.Generator`` seeding the sampling.
    """

    def __init__(
        self,
        buffer_name: str,
        group: RpcGroup,
        buffer_size: int,
        *,
        generator: Optional[torch.Generator] = None,
    ):
        self._episodes: List[EpisodeTransition] = []
        self._next = 0
        #: Episodes sampled from each member by this process, by member name.
        self.sampled_from: Counter = Counter()
        super().__init__(buffer_name, group, buffer_size, generator=generator)

    def _sampled(self, replies: Dict[str, Tuple[int, Any]]) -> None:
        for member, (count, _) in replies.items():
            if count > 0:
                self.sampled_from[member] += count

    def append(
        self,
        transition: Union[EpisodeTransition, List[Any]],
        required_attrs: Iterable[str] = EPISODE_REQUIRED_ATTRS,
    ) -> int:
        """Store one episode (an :class:`EpisodeTransition` or a list of steps) locally.

        When the local part is full, the oldest episode is overwritten.

        Args:
            transition: The episode; a list of steps (``Transition`` objects or dicts)
                is joined with :meth:`EpisodeTransition.from_episode`.
            required_attrs: Attributes the episode must have (by default the standard
                ones and ``action_log_prob``); ``()`` disables the check.

        Returns:
            Its position in the local part.

        Raises:
            ValueError: When a required attribute is missing, or the episode's
                attributes differ from those already stored.
        """
        episode = (
            transition
            if isinstance(transition, EpisodeTransition)
            else EpisodeTransition.from_episode(transition)
        )
        missing = [name for name in required_attrs if name not in episode]
        if missing:
            raise ValueError(
                f"the episode is missing required attribute(s) {missing}; it has {episode.keys()}"
            )
        with self._lock:
            if self._episodes and self._episodes[0].keys() != episode.keys():
                raise ValueError(
                    f"the episode has attributes {episode.keys()}, but the stored episodes have "
                    f"{self._episodes[0].keys()}"
                )
            episode.to("cpu")
            position = self._next
            if position == len(self._episodes):
                self._episodes.append(episode)
            else:
                self._episodes[position] = episode
            self._next = (position + 1) % self.buffer_size
            return position

    def extend(
        self, transitions: Iterable[Any], required_attrs: Iterable[str] = EPISODE_REQUIRED_ATTRS
    ) -> List[int]:
        """Store several episodes locally.

        Args:
            transitions: The episodes (:class:`EpisodeTransition` objects).
            required_attrs: Attributes every episode must have.
        """
        return [self.append(t, required_attrs) for t in transitions]

    def size(self) -> int:
        """Number of episodes in the local part."""
        return len(self._episodes)

    def clear(self) -> None:
        """Remove every episode from the local part."""
        with self._lock:
            self._episodes, self._next = [], 0

    def _op_sample(
        self, count: int, _concatenate: bool = True, method: Any = "random_unique", *_: Any
    ) -> Tuple[int, Optional[Tuple[List[EpisodeTransition]]]]:
        with self._lock:
            if method == "all":
                chosen = range(len(self._episodes))
            else:
                count = min(count, len(self._episodes))
                chosen = (
                    self._rng.choice(len(self._episodes), size=count, replace=False)
                    if count > 0
                    else []
                )
            if len(chosen) == 0:
                return 0, None
            return len(chosen), ([self._episodes[i] for i in chosen],)
