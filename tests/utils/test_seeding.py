import random

import gymnasium as gym
import numpy as np
import pytest
import torch

import machin.utils
from machin.utils.seeding import seed


def draws():
    return random.random(), float(np.random.rand()), torch.rand(1).item()


def test_seed_repeats_every_generator_and_is_exported():
    assert machin.utils.seed is seed
    seed(7)
    first = draws()
    seed(7)
    assert draws() == first
    seed(8)
    assert draws() != first


def test_seed_resets_environments_with_distinct_seeds():
    envs = [gym.make("CartPole-v1") for _ in range(2)]
    seed(3, *envs)
    observations = [env.unwrapped.state.copy() for env in envs]
    assert not np.allclose(observations[0], observations[1])
    seed(3, *envs)
    assert np.allclose(envs[0].unwrapped.state, observations[0])
    seed(3, *envs)
    a = [envs[1].action_space.sample() for _ in range(5)]
    seed(3, *envs)
    assert [envs[1].action_space.sample() for _ in range(5)] == a


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_bad_seed_is_rejected(bad):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        seed(bad)
