"""The pieces the distributional DQN family shares, checked against values computed by hand."""

import pytest
import torch

from machin.frame.algorithms import C51, DQN, IQN, QRDQN, RAINBOW
from machin.frame.algorithms.distributional import (
    DistributionalMixin,
    categorical_projection,
    quantile_huber_loss,
    quantile_midpoints,
)


# -- categorical projection -------------------------------------------------------------------
def test_projection_splits_each_shifted_atom_between_its_neighbours():
    # atoms 0, 1, 2, 3, 4; r = 1, discount 0.5: z -> 1 + 0.5 z = 1, 1.5, 2, 2.5, 3
    shifted = torch.tensor([[1.0, 1.5, 2.0, 2.5, 3.0]])
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2]])
    projected = categorical_projection(shifted, probs, 0.0, 4.0)
    # 1.0 -> atom 1; 1.5 -> half to 1, half to 2; 2.0 -> 2; 2.5 -> half to 2, half to 3; 3.0 -> 3
    expected = torch.tensor([[0.0, 0.1 + 0.1, 0.1 + 0.3 + 0.1, 0.1 + 0.2, 0.0]])
    assert torch.allclose(projected, expected, atol=1e-7)


def test_projection_weights_by_distance_and_clamps_outside_atoms():
    # atoms -1, 0, 1; 0.25 lies a quarter of the way from 0 to 1; -3 and 7 are clamped to the ends
    shifted = torch.tensor([[0.25, -3.0, 7.0], [-1.0, 0.0, 1.0]])
    probs = torch.tensor([[0.4, 0.5, 0.1], [0.2, 0.3, 0.5]])
    projected = categorical_projection(shifted, probs, -1.0, 1.0)
    assert torch.allclose(projected[0], torch.tensor([0.5, 0.4 * 0.75, 0.4 * 0.25 + 0.1]))
    assert torch.allclose(projected[1], probs[1])  # every atom exactly on its own place
    assert torch.allclose(projected.sum(dim=1), torch.ones(2))


def test_projection_rejects_mismatched_shapes_naming_them():
    with pytest.raises(ValueError, match=r"shifted \[2, 3\] and probs \[2, 4\]"):
        categorical_projection(torch.zeros(2, 3), torch.zeros(2, 4), 0.0, 1.0)
    with pytest.raises(ValueError, match="K >= 2"):
        categorical_projection(torch.zeros(2, 1), torch.zeros(2, 1), 0.0, 1.0)


# -- quantile Huber loss ----------------------------------------------------------------------
def test_quantile_midpoints():
    assert quantile_midpoints(4).tolist() == [0.125, 0.375, 0.625, 0.875]


@pytest.mark.parametrize(
    "predicted, target, tau, kappa, expected",
    [
        (0.0, 2.0, 0.25, 1.0, 0.25 * (2.0 - 0.5)),  # u = 2 > kappa: linear part, weight tau
        (0.0, -2.0, 0.25, 1.0, 0.75 * (2.0 - 0.5)),  # u = -2: weight 1 - tau
        (0.0, 0.5, 0.25, 1.0, 0.25 * 0.5 * 0.25),  # |u| <= kappa: u**2 / 2
        (0.0, 1.0, 0.25, 2.0, 0.25 * 0.5 * 1.0 / 2.0),  # u**2 / (2 kappa)
        (1.0, -2.0, 0.9, 0.0, 0.1 * 3.0),  # kappa = 0: |u|
    ],
)
def test_quantile_huber_loss_of_one_pair(predicted, target, tau, kappa, expected):
    loss = quantile_huber_loss(
        torch.tensor([[predicted]]), torch.tensor([[target]]), torch.tensor([tau]), kappa
    )
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(expected)


def test_quantile_huber_loss_sums_quantiles_and_averages_targets():
    predicted = torch.tensor([[0.0, 1.0]])
    target = torch.tensor([[0.0, 3.0]])
    tau = torch.tensor([[0.25, 0.75]])
    # quantile 0 (tau .25): u = 0, 3 -> 0, .25 * 2.5; quantile 1 (tau .75): u = -1, 2 -> .25 * .5, .75 * 1.5
    expected = (0.0 + 0.25 * 2.5) / 2 + (0.25 * 0.5 + 0.75 * 1.5) / 2
    assert quantile_huber_loss(predicted, target, tau).item() == pytest.approx(expected)


def test_quantile_huber_loss_pushes_each_quantile_towards_its_fraction():
    # one target sample at 0 and three quantiles below, at and above it
    predicted = torch.tensor([[-1.0, 0.0, 1.0]], requires_grad=True)
    target = torch.tensor([[0.0, 0.0]], requires_grad=True)
    quantile_huber_loss(predicted, target, torch.tensor([0.1, 0.5, 0.9])).sum().backward()
    grad = predicted.grad[0]
    assert grad[0] < 0 and grad[2] > 0  # a step against the gradient moves both towards 0
    assert grad[1] == 0
    assert grad[0].item() == pytest.approx(-0.1) and grad[2].item() == pytest.approx(0.1)
    assert target.grad is None  # the target is a constant of the loss


def test_quantile_huber_loss_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"predicted \[2, 3\] and target \[3, 3\]"):
        quantile_huber_loss(torch.zeros(2, 3), torch.zeros(3, 3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"got tau \[4\]"):
        quantile_huber_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(4))
    with pytest.raises(ValueError, match="kappa must be non-negative, got -1"):
        quantile_huber_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), -1)


# -- the family -------------------------------------------------------------------------------
def test_the_family_shares_the_mixin_over_dqn():
    for cls in (C51, QRDQN, IQN, RAINBOW):
        assert issubclass(cls, DistributionalMixin) and issubclass(cls, DQN)
    assert issubclass(RAINBOW, C51) and issubclass(IQN, QRDQN)
    # RAINBOW's target is C51's, not a copy of it
    assert "_bellman_target" not in vars(RAINBOW) and "_project" not in dir(RAINBOW)
