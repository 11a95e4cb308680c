"""Trainer: family defaults, evaluation without exploration, logs, checkpoints, early stop, errors."""

import csv
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from machin.frame.algorithms import DDPG, DQN, PPO
from machin.frame.trainer import Trainer
from tests.frame.algorithms.ddpg_nets import Actor, Critic
from tests.frame.algorithms.dqn_nets import QNet
from tests.frame.algorithms.pg_nets import CategoricalActor, ValueCritic

pytestmark = pytest.mark.filterwarnings("ignore:.*does not declare an input device", "ignore:.*CartPole-v0")


def make_dqn(**kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 16)
    return DQN(QNet(hidden=16), QNet(hidden=16), torch.optim.Adam, nn.MSELoss(), **kwargs)


class CountingDQN(DQN):
    """Counts its act calls by method."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = {"act_discrete": 0, "act_discrete_with_noise": 0, "update": 0}

    def act_discrete(self, *args, **kwargs):
        self.calls["act_discrete"] += 1
        return super().act_discrete(*args, **kwargs)

    def act_discrete_with_noise(self, *args, **kwargs):
        self.calls["act_discrete_with_noise"] += 1
        return super().act_discrete_with_noise(*args, **kwargs)

    def update(self, *args, **kwargs):
        self.calls["update"] += 1
        return super().update(*args, **kwargs)


def cartpole():
    return gym.make("CartPole-v0")


def test_dqn_run_writes_csv_tensorboard_curve_and_best_checkpoint(tmp_path):
    dqn = make_dqn()
    trainer = Trainer(dqn, cartpole, warmup_steps=50, eval_interval=2, eval_episodes=2, log_dir=str(tmp_path),
                      seed=0, progress=False)
    result = trainer.run(6)
    assert result.episodes == 6 and len(result.returns) == 6
    with open(result.paths["csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["episode"]) for r in rows] == list(range(1, 7))
    assert [float(r["return"]) for r in rows] == result.returns
    assert int(rows[-1]["steps"]) == result.steps == sum(int(x) for x in result.returns)  # CartPole: 1 per step
    assert [(int(r["episode"]), float(r["eval_return"])) for r in rows if r["eval_return"]] == result.eval_returns
    assert len(result.eval_returns) == 3
    best_episode, best = max(result.eval_returns, key=lambda item: (item[1], -item[0]))
    assert result.best_eval_return == best and result.best_version == best_episode
    assert (tmp_path / "checkpoints" / f"qnet_target_{best_episode}.pt").exists()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    with Image.open(result.paths["curve"]) as image:
        assert image.size[0] > 100 and image.size[1] > 100


def test_best_checkpoint_loads_into_a_fresh_framework_with_identical_greedy_actions(tmp_path):
    dqn = make_dqn()
    result = Trainer(dqn, cartpole, warmup_steps=20, eval_interval=3, eval_episodes=1, log_dir=str(tmp_path),
                     seed=1, progress=False).run(3)
    assert result.best_version == 3
    other = make_dqn()
    torch.manual_seed(5)
    other.qnet.net[0].weight.data.normal_()  # make sure loading changes something
    other.load(result.paths["checkpoints"], version=result.best_version)
    state = {"state": torch.randn(64, 4)}
    assert torch.equal(other.act_discrete(state, use_target=True), dqn.act_discrete(state, use_target=True))


def test_evaluation_acts_greedily_and_stores_nothing():
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), epsilon_decay=1.0)
    trainer = Trainer(dqn, cartpole, eval_episodes=3, seed=0, progress=False)
    mean = trainer.evaluate()
    assert dqn.calls["act_discrete_with_noise"] == 0 and dqn.calls["act_discrete"] > 0
    assert dqn.replay_buffer.size() == 0
    # greedy, seeded evaluation is repeatable, while epsilon is still 1 for training
    assert trainer.evaluate() == mean and dqn.epsilon == 1.0


def test_off_policy_updates_follow_warmup_and_updates_per_step():
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    result = Trainer(dqn, cartpole, warmup_steps=30, updates_per_step=0.5, eval_interval=0, seed=0,
                     progress=False).run(3)
    assert dqn.replay_buffer.size() == result.steps
    assert dqn.calls["update"] == (result.steps - 30) // 2


def test_ddpg_on_pendulum_uses_noisy_continuous_actions_within_bounds():
    torch.manual_seed(0)
    ddpg = DDPG(Actor(hidden=8), Actor(hidden=8), Critic(hidden=8), Critic(hidden=8), torch.optim.Adam,
                nn.MSELoss(), batch_size=16)
    trainer = Trainer(ddpg, gym.make("Pendulum-v1"), warmup_steps=100, eval_interval=2, eval_episodes=1,
                      seed=0, progress=False)
    assert trainer.act_method == "act_with_noise" and trainer.eval_act_method == "act"
    result = trainer.run(2)
    assert result.steps == 400 and len(result.eval_returns) == 1
    _, (state, action, *_) = ddpg.replay_buffer.sample_batch(400, sample_method="all")
    assert action["action"].shape == (400, 1) and state["state"].shape == (400, 3)


def test_ppo_stores_whole_episodes_with_truncation_and_updates_once_per_episode():
    torch.manual_seed(0)

    class CountingPPO(PPO):
        episodes = []

        def store_episode(self, episode):
            self.episodes.append(episode)
            super().store_episode(episode)

    ppo = CountingPPO(CategoricalActor(4, 2), ValueCritic(4), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    env = gym.make("CartPole-v0", max_episode_steps=12)
    result = Trainer(ppo, env, eval_interval=0, seed=0, progress=False).run(3)
    assert [len(e) for e in ppo.episodes] == [int(r) for r in result.returns]
    for episode in ppo.episodes:
        last = episode[-1]
        assert last["truncated"] == (len(episode) == 12 and not last["terminal"])
    assert ppo.replay_buffer.size() == 0  # PPO clears its buffer in every update


def test_solved_reward_stops_early():
    result = Trainer(make_dqn(), cartpole, solved_reward=1.0, solved_repeat=3, eval_interval=0, seed=0,
                     progress=False).run(50)
    assert result.solved_episode == 3 and result.episodes == 3


def test_without_log_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = Trainer(make_dqn(), cartpole, eval_interval=1, eval_episodes=1, seed=0, progress=False).run(2)
    assert result.paths == {} and result.best_version is None and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs, error, message", [
    ({"store": "batch"}, ValueError, "store must be 'transition' or 'episode', got 'batch'"),
    ({"act_method": "act_fast"}, ValueError, "act_method 'act_fast' is not a method of DQN"),
    ({"eval_episodes": 0}, ValueError, "eval_episodes must be a positive integer, got 0"),
    ({"warmup_steps": -1}, ValueError, "warmup_steps must be a non-negative number, got -1"),
    ({"smoothing": 1.0}, ValueError, r"smoothing must be in \[0, 1\), got 1.0"),
    ({"solved_repeat": 0}, ValueError, "solved_repeat must be a positive integer, got 0"),
])
def test_bad_options(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(make_dqn(), cartpole, **kwargs)


def test_unknown_family_needs_its_methods_and_episodes_must_be_positive():
    with pytest.raises(TypeError, match="give act_method, eval_act_method and store"):
        Trainer(object(), cartpole)
    with pytest.raises(ValueError, match="episodes must be a positive integer, got 0"):
        Trainer(make_dqn(), cartpole, progress=False).run(0)


@pytest.mark.learning
def test_dqn_learns_cartpole_through_the_trainer(tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    dqn = DQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="sum"), batch_size=64,
              epsilon_decay=0.999, update_rate=0.01, replay_size=20000)
    start, cpu = time.time(), time.process_time()
    result = Trainer(dqn, cartpole, warmup_steps=500, eval_interval=20, eval_episodes=3, solved_reward=150,
                     log_dir=str(tmp_path), seed=0, progress=False).run(300)
    print(f"DQN through the Trainer: solved at episode {result.solved_episode} ({result.steps} steps, "
          f"{time.time() - start:.1f} s wall, {time.process_time() - cpu:.1f} s CPU), best evaluation "
          f"{result.best_eval_return:.1f}")
    assert result.solved_episode is not None
    assert result.best_eval_return >= 150
