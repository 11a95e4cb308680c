"""What the policy-gradient family shares (A2C, PPO, TRPO, A3C, IMPALA, and SAC's actor).

* :func:`split_actor_output`: checks what a stochastic actor returns,
  ``(action, log_prob, <entropy>, ...)``;
* :class:`PolicyBatch`: the samples of one on-policy training step;
* :class:`StochasticActing`: sampled or most likely actions, ``act(state, deterministic=...)``.

The discounted returns and advantages these algorithms train on are computed by
:func:`machin.frame.returns.returns_and_advantages`; :func:`~machin.frame.algorithms.utils.as_column`
shapes the networks' outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from .utils import forward_takes, safe_call

__all__ = ["split_actor_output", "PolicyBatch", "StochasticActing"]


def split_actor_output(output: Any, owner: str, need_entropy: bool = False) -> Tuple[Any, ...]:
    """Check that a stochastic actor returned ``(action, log_prob, <entropy>, ...)``.

    Returns ``(action, log_prob, entropy_or_None)``.

    Args:
        output: What the actor returned.
        owner: Name of the algorithm, for the error message.
        need_entropy: Whether the entropy (third output) is required.

    Raises:
        ValueError: When the output is not a tuple of at least two values (three
            when ``need_entropy``).
    """
    needed = 3 if need_entropy else 2
    if not isinstance(output, tuple) or len(output) < needed:
        got = (
            f"a tuple of {len(output)} values"
            if isinstance(output, tuple)
            else type(output).__name__
        )
        wanted = "(action, log_prob, entropy, ...)" if need_entropy else "(action, log_prob, ...)"
        reason = " because entropy_weight is set" if need_entropy else ""
        raise ValueError(f"the actor of {owner} must return {wanted}{reason}, got {got}")
    return output[0], output[1], output[2] if len(output) > 2 else None


def _take(data: Any, index: torch.Tensor, index_list: List[int]) -> Any:
    """Rows ``index`` of a tensor, a list, or a dict of either."""
    if isinstance(data, dict):
        return {k: _take(v, index, index_list) for k, v in data.items()}
    if isinstance(data, torch.Tensor):
        return data[index.to(data.device)]
    return [data[i] for i in index_list]


@dataclass
class PolicyBatch:
    """Samples for one on-policy training step.

    ``target_value`` (the discounted return) and ``advantage`` are ``[B, 1]`` float
    tensors; ``old_log_prob`` is the ``[B, 1]`` log-probability of each action under
    the policy as it was when
    :meth:`~machin.frame.algorithms.a2c.A2C.update` started (``None`` for algorithms
    that do not need it).

    Attributes:
        size: Number of samples ``B``.
        state: State dict of the samples, ``{key: [B, ...]}``.
        action: Action dict of the samples.
    """

    size: int
    state: Dict[str, Any]
    action: Dict[str, Any]
    target_value: torch.Tensor
    advantage: torch.Tensor
    old_log_prob: Optional[torch.Tensor] = None

    def subset(self, index: torch.Tensor) -> PolicyBatch:
        """The samples at positions ``index``."""
        index_list = index.tolist()
        old = None if self.old_log_prob is None else _take(self.old_log_prob, index, index_list)
        return PolicyBatch(
            len(index_list),
            _take(self.state, index, index_list),
            _take(self.action, index, index_list),
            _take(self.target_value, index, index_list),
            _take(self.advantage, index, index_list),
            old,
        )


class StochasticActing:
    """Acting with a stochastic policy ``self.actor``: a sampled action, or the most likely one.

    With ``deterministic=True`` the actor is called through
    :func:`~machin.frame.algorithms.utils.safe_call` with the extra input
    ``deterministic=True``, and it returns its most likely action (the mean of a
    Gaussian, ``tanh(mean)`` of a squashed one, the argmax of a categorical one) in its
    usual output format, ``(action, log_prob, ...)``. The actor's ``forward`` therefore
    needs a ``deterministic`` parameter (or ``**kwargs``); without one, the call raises a
    ``TypeError`` that says what to add (``safe_call`` would otherwise drop the key and
    sample).
    """

    actor: nn.Module

    def can_act_deterministically(self) -> bool:
        """Whether the actor's ``forward`` takes ``deterministic`` (by that name or ``**kwargs``);
        ``False`` while there is no actor."""
        actor = getattr(self, "actor", None)
        return actor is not None and forward_takes(actor, "deterministic")

    def _actor_output(self, state: Dict[str, Any], deterministic: bool) -> Any:
        """The actor's output for ``state``: sampled, or with ``deterministic=True`` passed to it."""
        if not isinstance(deterministic, bool):
            raise TypeError(
                f"deterministic must be True or False, got {deterministic!r} of type "
                f"{type(deterministic).__name__}"
            )
        if not deterministic:
            return safe_call(self.actor, state)
        if not self.can_act_deterministically():
            actor = type(self.actor).__name__
            raise TypeError(
                f"{type(self).__name__}.act(state, deterministic=True) calls the actor with "
                f"deterministic=True, but the forward of the actor {actor} has no 'deterministic' "
                f"parameter (nor **kwargs): add one, e.g. "
                f"forward(self, state, action=None, deterministic=False), and when it is True return "
                f"the most likely action (the mean, tanh(mean) or argmax) in the usual output"
            )
        return safe_call(self.actor, state, {"deterministic": True})
