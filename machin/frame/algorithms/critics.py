"""Critics with target networks, shared by DDPG (and its variants), TD3, SAC and MADDPG.

* :class:`CriticSet`: one trained critic with its target and optimizer;
* :func:`critic_action_input`: the default ``action_transform_function``, which turns
  an actor's action into the critic's keyword input ``{"action": action}``;
* :func:`value_column`: a critic's value ``[B, 1]`` out of whatever it returned;
* :func:`restore_online`: copy loaded target networks back into their online networks
  (soft updates of several pairs are :func:`~machin.frame.algorithms.utils.soft_update_pairs`);
* :class:`SoftTargets`: the ``update_rate`` option with the target update and the restore
  after loading, for an algorithm that names its ``(online, target)`` pairs;
* :class:`TwinCritics`: :class:`SoftTargets` for two critics ``critic`` and ``critic2``,
  each with its target and optimizer (SAC and IQL).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, NamedTuple, Tuple

import torch
from torch import nn

from .base import split_output
from .options import SoftTargetOptions
from .utils import as_column, hard_update, soft_update_pairs

__all__ = [
    "CriticSet",
    "critic_action_input",
    "value_column",
    "restore_online",
    "SoftTargets",
    "TwinCritics",
]


class CriticSet(NamedTuple):
    """One trained critic: its attribute name, the network, its target and its optimizer."""

    name: str
    net: nn.Module
    target: nn.Module
    optimizer: torch.optim.Optimizer


def critic_action_input(raw_output_action: Any, *_: Any) -> Dict[str, Any]:
    """Turn the actor's action into the critic's action input (default ``{"action": raw}``).

    It is called with the raw action, then the (next) state dictionary and the
    dictionary of custom attributes of the sampled batch, and must return a
    dictionary shaped like the stored ``Transition.action``.

    Args:
        raw_output_action: The actor's action output.
    """
    return {"action": raw_output_action}


def value_column(output: Any, size: int, network: str) -> torch.Tensor:
    """The value ``[B, 1]`` that a critic returned first (extra outputs are dropped).

    Args:
        output: What the critic returned: a value ``[B]`` or ``[B, 1]``, or a tuple
            starting with it.
        size: The batch size ``B``.
        network: Name of the critic, for the error message.

    Raises:
        ValueError: When the value is not one number per sample.
    """
    return as_column(split_output(output)[0], size, f"{network} output")


def restore_online(pairs: Iterable[Tuple[nn.Module, nn.Module]]) -> None:
    """Copy every target network into its online network (after the targets were loaded).

    Args:
        pairs: ``(online, target)`` networks.
    """
    for online, target in pairs:
        hard_update(online, target)


class SoftTargets(SoftTargetOptions):
    """Target networks that follow their online networks by soft updates (DDPG, TD3, SAC, MADDPG).

    The host class names its pairs in :meth:`_online_target_pairs`; every target moves by
    ``update_rate`` in one ``foreach`` call, and after :meth:`load` the loaded targets are
    copied into their online networks.
    """

    def _online_target_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        """``(online, target)`` for every network with a target."""
        raise NotImplementedError

    def _update_targets(self) -> None:
        soft_update_pairs(self._online_target_pairs(), self.update_rate)

    def _post_load(self) -> None:
        restore_online(self._online_target_pairs())


class TwinCritics(SoftTargets):
    """Two critics, ``critic`` and ``critic2``, each with its target and its own optimizer,
    and the ``criterion`` they learn with (SAC and IQL build them the same way).

    The host class is a ``TorchFramework`` with the ``critic_learning_rate`` option; its
    constructor calls :meth:`_set_up_twin_critics`.
    """

    def _set_up_twin_critics(
        self,
        critic: nn.Module,
        critic_target: nn.Module,
        critic2: nn.Module,
        critic2_target: nn.Module,
        optimizer: Any,
        criterion: Any,
    ) -> None:
        """Check and keep ``criterion`` and both critics with their targets (each target
        hard-copied from its critic now), and make each critic's optimizer.

        Raises:
            TypeError: When ``criterion`` is not callable.
            NetworkMismatchError: (a ``ValueError``) When a target differs from its critic
                in parameter names or shapes.
        """
        self._check_criterion(criterion)
        self._check_same_structure(
            critic_target=(critic, critic_target), critic2_target=(critic2, critic2_target)
        )
        self.criterion = criterion
        self.critic, self.critic_target = critic, critic_target
        self.critic2, self.critic2_target = critic2, critic2_target
        hard_update(self.critic_target, self.critic)
        hard_update(self.critic2_target, self.critic2)
        self.critic_optim = self._make_optimizer(optimizer, critic, self.critic_learning_rate)
        self.critic2_optim = self._make_optimizer(optimizer, critic2, self.critic_learning_rate)

    def _online_target_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        """``(online, target)`` for both critics."""
        return [(self.critic, self.critic_target), (self.critic2, self.critic2_target)]
