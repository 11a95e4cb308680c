"""evaluate_policy: plays a policy (an algorithm or a callable) for seeded episodes and returns the mean return."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import BC, TD3
from machin.frame.offline import eval_act_method, evaluate_policy

from .expert import expert_action


def hand_return(env, act, seed):
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        total += reward
        done = terminated or truncated
    return total


def test_a_callable_policy_gets_the_state_dict_and_the_mean_return_of_seeded_episodes():
    env = gym.make("Pendulum-v1", max_episode_steps=30)
    seen = []

    def policy(state):
        seen.append(state["state"].shape)
        return torch.as_tensor(expert_action(state["state"][0].numpy())).view(1, 1)

    mean = evaluate_policy(policy, env, episodes=2, seed=3)
    expected = [hand_return(env, expert_action, 3), hand_return(env, expert_action, 4)]
    assert mean == pytest.approx(sum(expected) / 2, abs=1e-4)
    assert seen[0] == (1, 3) and len(seen) == 60


def test_an_algorithm_acts_with_its_evaluation_method():
    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, state):
            return self.fc(state) * 0 + torch.tensor([[0.0, 1.0]])  # always action 1

    bc = BC(Logits(), torch.optim.Adam, policy_type="discrete")
    assert eval_act_method(bc) == "act_discrete"
    env = gym.make("CartPole-v1")
    mean = evaluate_policy(bc, env, episodes=2, seed=0)
    assert mean == pytest.approx(
        (hand_return(env, lambda o: 1, 0) + hand_return(env, lambda o: 1, 1)) / 2
    )


def test_an_environment_id_is_made_and_the_same_seed_gives_the_same_return():
    policy = lambda state: torch.zeros(1, 1)  # noqa: E731
    first = evaluate_policy(policy, "Pendulum-v1", episodes=1, seed=7)
    assert first == evaluate_policy(policy, "Pendulum-v1", episodes=1, seed=7)
    assert first != evaluate_policy(policy, "Pendulum-v1", episodes=1, seed=8)


def test_bad_arguments_are_named():
    env = gym.make("Pendulum-v1", max_episode_steps=5)
    with pytest.raises(ValueError, match="episodes must be a positive integer, got 0"):
        evaluate_policy(lambda s: torch.zeros(1, 1), env, episodes=0)
    with pytest.raises(TypeError, match="policy must be a machin algorithm or a callable"):
        evaluate_policy(np.zeros(1), env)
    with pytest.raises(TypeError, match="act_method and act_kwargs are for a machin algorithm"):
        evaluate_policy(lambda s: torch.zeros(1, 1), env, act_method="act")
    td3 = TD3(*(nn.Linear(1, 1) for _ in range(6)), torch.optim.Adam, nn.MSELoss())
    with pytest.raises(ValueError, match="act_method must name an act method of TD3, got 'fly'"):
        evaluate_policy(td3, env, act_method="fly")
