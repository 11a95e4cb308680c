"""Trust region policy optimization: A2C whose actor takes a natural-gradient step.

The Fisher matrix comes from log-probabilities alone, so the actor needs no extra
methods: with ``x = log_prob - old_log_prob`` of the stored actions, the KL
divergence from the old policy to the new one is estimated as
``mean(exp(x) - 1 - x)``. That estimate is never negative, its expectation over
actions drawn from the old policy is the KL divergence, and its Hessian at the old
parameters is ``mean(g g^T)`` with ``g`` the gradient of each log-probability: a
sample Fisher matrix, positive semi-definite. Fisher-vector products are
Hessian-vector products of this estimate (double backward); conjugate gradient
solves ``F s = -grad`` for the step direction, which is scaled to the trust-region
boundary ``0.5 s^T F s = kl_max_delta`` and then halved until the KL estimate
stays within ``kl_max_delta`` and the surrogate loss improves.
"""

from __future__ import annotations

from typing import Callable, List

import torch

from .a2c import A2C
from .options import Option, non_negative, positive, positive_int
from .policy import PolicyBatch

__all__ = ["TRPO", "conjugate_gradient", "kl_from_log_probs"]


def kl_from_log_probs(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """Estimate ``KL(old || new)`` from log-probabilities of actions drawn from the old policy.

    Uses ``mean(exp(x) - 1 - x)`` with ``x = log_prob - old_log_prob``: non-negative,
    unbiased, and with the sample Fisher matrix as Hessian at ``x = 0``.
    """
    x = log_prob - old_log_prob.to(log_prob.device)
    return (torch.expm1(x) - x).mean()


def conjugate_gradient(
    matrix_vector: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    iterations: int = 10,
    residual_threshold: float = 1e-10,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Approximately solve ``A x = b`` for a symmetric positive (semi-)definite ``A``.

    Args:
        matrix_vector: Computes ``A v``.
        b: Right-hand side (1-D).
        iterations: Maximum number of iterations.
        residual_threshold: Stop once the squared residual norm falls below this.
        eps: Added to denominators against division by zero.
    """
    x = torch.zeros_like(b)
    residual = b.clone()
    direction = b.clone()
    residual_sq = residual @ residual
    for _ in range(iterations):
        if residual_sq < residual_threshold:
            break
        product = matrix_vector(direction)
        alpha = residual_sq / (direction @ product + eps)
        x += alpha * direction
        residual -= alpha * product
        new_residual_sq = residual @ residual
        direction = residual + (new_residual_sq / (residual_sq + eps)) * direction
        residual_sq = new_residual_sq
    return x


def _flat_grad(output: torch.Tensor, params: List[torch.Tensor], **kwargs) -> torch.Tensor:
    grads = torch.autograd.grad(output, params, allow_unused=True, **kwargs)
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)]
    )


@torch.no_grad()
def _set_flat(params: List[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        p.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


class TRPO(A2C):
    """TRPO: the critic trains as in A2C, the actor takes one trust-region step per update.

    The actor and critic contracts, storage, GAE and the critic steps are those of
    :class:`~machin.frame.algorithms.a2c.A2C` (see there for the shared arguments).
    The actor has no optimizer: each :meth:`update` takes one natural-gradient step
    (see the module documentation) on ``batch_size`` stored samples, so set
    ``batch_size`` at least as large as the number of samples collected between
    updates to use all of them. The policy loss is the importance-weighted surrogate
    ``-mean(exp(log_prob - old_log_prob) * advantage)`` (plus the entropy term when
    ``entropy_weight`` is set). ``gradient_max`` and the learning-rate scheduler
    apply to the critic only (one scheduler slot). Its own options (``kl_max_delta``,
    ``damping``, the line search and conjugate-gradient settings) are listed in the
    signature and documented as attributes.

    Raises:
        ValueError: When an option is out of range.
    """

    _needs_old_log_prob = True

    actor_update_times = 1
    actor_learning_rate = None
    joint_update = False  # the actor takes a trust-region step, not an optimizer step
    kl_max_delta = Option(
        0.01,
        positive,
        "Largest allowed KL divergence between the policies before and after a step.",
    )
    damping = Option(0.1, non_negative, "Added to the Fisher matrix's diagonal.")
    line_search_backtracks = Option(
        10, positive_int, "Step halvings tried before the step is abandoned."
    )
    conjugate_eps = Option(1e-8, positive, "Guard against division by zero in conjugate gradient.")
    conjugate_iterations = Option(10, positive_int, "Conjugate-gradient iterations.")
    conjugate_res_threshold = Option(
        1e-10, non_negative, "Conjugate gradient stops below this squared residual."
    )

    def _make_actor_optimizer(self, optimizer: Callable, learning_rate: float) -> None:
        return None

    def _policy_loss(
        self, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantage: torch.Tensor
    ) -> torch.Tensor:
        """Minus the importance-weighted surrogate ``mean(exp(log_prob - old_log_prob) * advantage)``."""
        ratio = torch.exp(log_prob - old_log_prob.to(log_prob.device))
        return -(ratio * advantage.to(log_prob.device)).mean()

    def _update_actor(self, batch: PolicyBatch) -> float:
        """One natural-gradient step with a KL-bounded backtracking line search."""
        params = [p for p in self.actor.parameters() if p.requires_grad]
        log_prob, entropy = self._evaluate_policy(batch)
        loss, policy_loss = self._actor_loss(batch, log_prob, entropy)
        self._maybe_visualize(loss, "actor")
        grad = _flat_grad(loss, params, retain_graph=True)
        kl_grad = _flat_grad(
            kl_from_log_probs(log_prob, batch.old_log_prob), params, create_graph=True
        )

        def fisher_vector(vector: torch.Tensor) -> torch.Tensor:
            return _flat_grad(kl_grad @ vector, params, retain_graph=True) + self.damping * vector

        direction = conjugate_gradient(
            fisher_vector,
            -grad,
            self.conjugate_iterations,
            self.conjugate_res_threshold,
            self.conjugate_eps,
        )
        curvature = direction @ fisher_vector(direction)
        if curvature > 0:
            self._line_search(
                batch,
                params,
                direction * torch.sqrt(2 * self.kl_max_delta / curvature),
                loss.item(),
            )
        return -policy_loss.item()

    @torch.no_grad()
    def _line_search(
        self,
        batch: PolicyBatch,
        params: List[torch.Tensor],
        full_step: torch.Tensor,
        loss_before: float,
    ) -> bool:
        """Take the largest of ``full_step * 0.5**i`` that keeps the KL bound and lowers the loss."""
        start = torch.cat([p.reshape(-1) for p in params])
        for i in range(self.line_search_backtracks):
            _set_flat(params, start + full_step * 0.5**i)
            log_prob, entropy = self._evaluate_policy(batch)
            loss, _ = self._actor_loss(batch, log_prob, entropy)
            kl = kl_from_log_probs(log_prob, batch.old_log_prob)
            if kl <= self.kl_max_delta and loss.item() < loss_before:
                return True
        _set_flat(params, start)
        return False
