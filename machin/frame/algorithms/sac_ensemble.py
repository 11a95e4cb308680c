"""SAC with a list of critics: what TQC, REDQ, DroQ and CrossQ share.

:class:`EnsembleSAC` is :class:`~machin.frame.algorithms.sac.SAC` (the actor, the
temperature alpha and its tuning, acting and storing are SAC's) with SAC's two named
critics replaced by a list of critics that learn together in one optimizer step, and an
:meth:`~EnsembleSAC.update` that takes ``update_times`` critic steps per call and a policy
step after every ``policy_update_delay``-th critic step. A subclass says two things: how
the critics learn (:meth:`~EnsembleSAC._critic_loss`) and which value of the ensemble the
actor ascends (:meth:`~EnsembleSAC._policy_q`). It is not an algorithm by itself and is
not exported from :mod:`machin.frame.algorithms`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from .base import UpdateResult
from .compiled import compilable
from .critics import value_column
from .options import Option, positive_int
from .replay import SampledBatch
from .sac import SAC
from .utils import hard_update, safe_call

__all__ = ["EnsembleSAC"]


def _ensemble(name: str, networks: Any, count: Optional[int] = None) -> nn.ModuleList:
    """``networks`` (a list of distinct modules) as a ``ModuleList``; errors name the argument.

    Args:
        name: The argument's name, for the messages.
        networks: A list, tuple or ``nn.ModuleList`` of networks.
        count: The number of networks it must hold (``None``: at least one).
    """
    if not isinstance(networks, (list, tuple, nn.ModuleList)):
        raise TypeError(
            f"{name} must be a list of networks (nn.Module), got {type(networks).__name__}"
        )
    if not networks:
        raise ValueError(f"{name} must hold at least one network, got an empty list")
    for index, network in enumerate(networks):
        if not isinstance(network, nn.Module):
            raise TypeError(
                f"{name}[{index}] must be a network (nn.Module), got {type(network).__name__}"
            )
    if count is not None and len(networks) != count:
        raise ValueError(f"{name} must hold one network per critic ({count}), got {len(networks)}")
    first_index: Dict[int, int] = {}
    for index, network in enumerate(networks):
        earlier = first_index.setdefault(id(network), index)
        if earlier != index:
            raise ValueError(
                f"{name}[{index}] is the same network as {name}[{earlier}]; give each its own network"
            )
    return nn.ModuleList(networks)


class EnsembleSAC(SAC):
    """SAC with a list of critics, several critic steps per update and a delayed policy step.

    The actor, the temperature alpha and the options of
    :class:`~machin.frame.algorithms.sac.SAC` are kept. The critics learn in one optimizer
    step on the sum of their losses (``gradient_max`` clips the norm over all of them);
    :meth:`update` reports the mean of their losses. The learning-rate schedulers take
    two entries: the actor's and the critics' optimizers.

    Args:
        actor: Stochastic policy, as SAC's: ``actor(<state keys>, action=None)`` returns
            ``(action, log_prob, ...)`` with the action drawn by ``rsample()``.
        critics: The critics, a list of networks called as
            ``critic(<state keys>, <action keys>)``; what they return is the subclass's.
        critic_targets: One target network per critic, of the same architecture
            (hard-copied from its critic now); ``None`` only for a class without targets.
        optimizer: Optimizer class, called as ``optimizer(params, lr=...)`` for the actor,
            for all critics together and for ``log(alpha)``.

    Raises:
        TypeError: When ``critics`` or ``critic_targets`` is not a list of networks.
        ValueError: When a list is empty, holds a network twice, or the targets do not
            pair with the critics.
    """

    _is_top = ["actor", "critics", "critic_targets"]
    _is_restorable = ["actor", "critic_targets"]
    _legacy_hooks: Dict[str, str] = {}  # new algorithms: no Machin 0.3.4 helpers to honour

    update_times = Option(
        1,
        positive_int,
        "Critic steps per update() call, each on its own batch (the update-to-data ratio "
        "when update() is called once per environment step).",
    )
    policy_update_delay = Option(
        1,
        positive_int,
        "Step the actor and alpha after every this many critic steps (counted across calls).",
    )

    def __init__(
        self,
        actor: nn.Module,
        critics: Sequence[nn.Module],
        critic_targets: Optional[Sequence[nn.Module]],
        optimizer: Callable,
        *_: Any,
        **options: Any,
    ):
        # SAC's constructor takes two named critics: skip it, keep the option handling above it.
        super(SAC, self).__init__(*_, **options)
        self.critics = _ensemble("critics", critics)
        self.critic_targets = self._targets(critic_targets)
        self.critic_optim = self._make_optimizer(optimizer, self.critics, self.critic_learning_rate)
        self._set_up_actor_and_buffer(actor, optimizer)
        #: Critic steps taken (``update_times`` per :meth:`update`); the policy steps follow it.
        self.critic_steps = 0
        self._policy_value: Optional[float] = None

    def _targets(self, critic_targets: Optional[Sequence[nn.Module]]) -> Optional[nn.ModuleList]:
        """Check the target networks and copy each critic into its target."""
        if "critic_targets" not in self._is_top:
            return None
        if critic_targets is None:
            raise TypeError(
                f"{type(self).__name__} needs critic_targets: one target network per critic"
            )
        targets = _ensemble("critic_targets", critic_targets, len(self.critics))
        for index, (critic, target) in enumerate(zip(self.critics, targets)):
            if critic is target:
                raise ValueError(
                    f"critic_targets[{index}] is critics[{index}] itself; a target must be a "
                    f"separate network of the same architecture"
                )
            self._check_same_structure(**{f"critic_targets[{index}]": (critic, target)})
            hard_update(target, critic)
        return targets

    def _optimizers(self) -> List[torch.optim.Optimizer]:
        return [self.actor_optim, self.critic_optim]

    def _online_target_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        """``(critic, target)`` pairs; none without targets."""
        if self.critic_targets is None:
            return []
        return list(zip(self.critics, self.critic_targets))

    def _trained_networks(self) -> List[nn.Module]:
        """The networks in training mode during :meth:`update` (targets too: dropout stays on in them)."""
        return [self.actor, *self.critics, *(self.critic_targets or ())]

    # -- the critics' outputs ---------------------------------------------------------------
    def _output_of(
        self, networks: str, index: int, state: Dict[str, Any], action: Dict[str, Any]
    ) -> Tuple[Any, str]:
        """``(first output, description)`` of network ``index`` of the list ``networks``."""
        network = getattr(self, networks)[index]
        output = safe_call(network, state, action)
        first = output[0] if isinstance(output, tuple) else output
        return first, f"{networks}[{index}] ({type(network).__name__})"

    def _values(
        self,
        networks: str,
        state: Dict[str, Any],
        action: Dict[str, Any],
        size: int,
        indices: Optional[Iterable[int]] = None,
    ) -> torch.Tensor:
        """The values ``[B, k]`` of the critics ``indices`` (all by default) of the list ``networks``.

        Args:
            networks: ``"critics"`` or ``"critic_targets"``.
            state: State dict of the critics.
            action: Action dict of the critics.
            size: Batch size ``B``.
            indices: Which networks of the list.

        Raises:
            ValueError: When a network returns other than one value per sample.
        """
        indices = range(len(getattr(self, networks))) if indices is None else indices
        columns = []
        for index in indices:
            output, name = self._output_of(networks, index, state, action)
            columns.append(value_column(output, size, name))
        return torch.cat([c.to(columns[0].device) for c in columns], dim=1)

    # -- what a subclass says ------------------------------------------------------------
    def _critic_loss(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        """The sum of every critic's loss on ``batch`` (with the gradient of the critics only)."""
        raise NotImplementedError

    def _policy_q(self, state: Dict[str, Any], action: Dict[str, Any], size: int) -> torch.Tensor:
        """The value ``[B, 1]`` of ``action`` that the actor ascends, from the critics."""
        raise NotImplementedError

    # -- the update's steps ----------------------------------------------------------------
    @compilable(("critics",))
    def _critic_losses(self, batch: SampledBatch, alpha: torch.Tensor) -> List[torch.Tensor]:
        """``[the critics' summed loss]`` (one compiled step after :meth:`compile`)."""
        return [self._critic_loss(batch, alpha)]

    def _actor_loss(
        self, batch: SampledBatch, action: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(mean(alpha * log_prob - Q(s, a)), policy value)`` with ``Q`` from :meth:`_policy_q`.

        Raises:
            ValueError: When the action carries no gradient (the loss reaches the actor
                only through the critics: draw the action with ``rsample()``).
        """
        if torch.is_grad_enabled() and not action.requires_grad:
            raise ValueError(
                f"{type(self).__name__} trains the actor through the critics, so the actor's action "
                f"must carry a gradient (a continuous action drawn with rsample()); got a "
                f"{action.dtype} action without one"
            )
        return super()._actor_loss(batch, action, log_prob, alpha)

    def _critic_step(
        self, batch: SampledBatch, alpha: torch.Tensor, step: bool
    ) -> Tuple[float, bool]:
        """``(mean critic loss, whether the step was taken)``; ``step=False`` only computes the loss."""
        (loss,) = self._critic_losses(batch, alpha)
        taken = True
        if step:
            self._maybe_visualize(loss, "critics")
            taken = self._optimize(loss, self.critic_optim, self.critics, self.gradient_max)
        return loss.item() / len(self.critics), taken

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_target: bool = True,
        update_entropy_alpha: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """Take ``update_times`` critic steps, each on a new batch, each followed by the policy
        step when due (every ``policy_update_delay``-th critic step) and the soft target update.

        A step skipped for a non-finite loss ends the update: no later step is taken and
        no target moves.

        Args:
            update_value: Step the critics.
            update_policy: Step the actor (when due).
            update_target: Soft-update the target critics (where there are targets).
            update_entropy_alpha: Step the temperature alpha (when the policy step is due).
            concatenate_samples: Concatenate the sampled states into batched tensors
                (``False`` hands the networks per-sample lists).

        Returns:
            ``(policy value, value loss)`` as floats: the policy value of the latest policy
            step (the batch mean of ``Q(s, a) - alpha * log_prob(a|s)``, ``Q`` as the actor
            sees it; before the first policy step, computed without a step) and the mean
            critic loss of this call's critic steps; ``None`` when the buffer is empty.
        """
        networks = self._trained_networks()
        self._set_mode(True, *networks)
        value_losses: List[float] = []
        batch = alpha = None
        for _ in range(self.update_times):
            batch = self._sample(concatenate_samples)
            if batch is None:
                break
            alpha = self.log_alpha.detach().exp()
            value_loss, taken = self._critic_step(batch, alpha, update_value)
            value_losses.append(value_loss)
            self.critic_steps += 1
            if taken and self.critic_steps % self.policy_update_delay == 0:
                taken, self._policy_value = self._policy_step(
                    batch, alpha, update_policy, update_entropy_alpha
                )
            if not taken:
                break
            if update_target:
                self._update_targets()
        if batch is not None and self._policy_value is None:
            with torch.no_grad():
                self._policy_value = float(self._actor_and_alpha_losses(batch, alpha)[1])
        self._set_mode(False, *networks)
        if not value_losses:
            return None
        return UpdateResult(self._policy_value, sum(value_losses) / len(value_losses))
