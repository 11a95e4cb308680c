"""Double DQN with prioritized experience replay."""

from __future__ import annotations

from typing import Optional

import torch

from ..buffers import PrioritizedBuffer
from .dqn import DQN, SampledBatch

__all__ = ["DQNPer"]


class DQNPer(DQN):
    """DQN that samples transitions by priority (|TD error|) and weights losses by importance.

    Takes the arguments of :class:`~machin.frame.algorithms.dqn.DQN`; its default
    replay buffer is a :class:`~machin.frame.buffers.PrioritizedBuffer`. The
    criterion must return one loss per sample (shape ``[B, 1]`` or ``[B]``), e.g.
    ``nn.MSELoss(reduction="none")``, because each sample's loss is multiplied by
    its importance-sampling weight before averaging.
    """

    def _default_buffer(self, replay_size: int, replay_device) -> PrioritizedBuffer:
        return PrioritizedBuffer(replay_size, replay_device)

    def _sample(self, concatenate: bool) -> Optional[SampledBatch]:
        size, batch, index, is_weight = self.replay_buffer.sample_batch(
            self.batch_size, concatenate,
            sample_attrs=["state", "action", "reward", "next_state", "terminal", "*"],
        )
        if size == 0:
            return None
        weight = torch.as_tensor(is_weight, dtype=torch.get_default_dtype()).view(size, 1)
        return self._make_batch(size, batch, index=index, weight=weight)

    def _per_sample_loss(self, per_sample: torch.Tensor, batch: SampledBatch) -> torch.Tensor:
        """Weight per-sample losses by importance and return their mean (shared with RAINBOW)."""
        size = batch.size
        if per_sample.dim() == 0 or per_sample.numel() != size:
            raise ValueError(
                f"{type(self).__name__} needs a criterion that returns one loss per sample "
                f"(shape [{size}, 1]); got shape {list(per_sample.shape)}. "
                f'Use e.g. nn.MSELoss(reduction="none") instead of reduction="sum" or "mean".'
            )
        return (per_sample.view(size, 1) * batch.weight.to(per_sample.device)).mean()

    def _value_loss(self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch) -> torch.Tensor:
        size = batch.size
        target = target.view(size, 1).to(predicted.device)
        loss = self._per_sample_loss(self.criterion(target, predicted.view(size, 1)), batch)
        priority = (predicted.detach() - target).abs().view(-1).cpu().numpy()
        self.replay_buffer.update_priority(priority, batch.index)
        return loss
