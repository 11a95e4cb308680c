"""Trainer: family defaults, greedy evaluation, limits, files written and read back, errors."""

import csv
import struct
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import SyncVectorEnv
from PIL import Image
from tensorboardX.proto import event_pb2
from torch import nn

from machin.env.wrappers import ParallelWrapperDummy
from machin.frame import algorithms
from machin.frame.algorithms import DDPG, DQN, PPO
from machin.frame.trainer import Trainer
from machin.utils.save_env import SaveEnv
from tests.frame.algorithms.nets import Actor, CategoricalActor, Critic, QNet, ValueCritic

pytestmark = pytest.mark.filterwarnings("ignore:.*CartPole-v0")


def make_dqn(cls=DQN, hidden=16, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 16)
    return cls(QNet(hidden=hidden), QNet(hidden=hidden), torch.optim.Adam, nn.MSELoss(), **kwargs)


class CountingDQN(DQN):
    """Counts its act and update calls and remembers the keyword arguments of the act calls."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = {"act_discrete": 0, "act_discrete_with_noise": 0, "update": 0}
        self.kwargs = {"act_discrete": [], "act_discrete_with_noise": []}

    def act_discrete(self, state, **kwargs):
        self.calls["act_discrete"] += 1
        self.kwargs["act_discrete"].append(kwargs)
        return super().act_discrete(state, **kwargs)

    def act_discrete_with_noise(self, state, **kwargs):
        self.calls["act_discrete_with_noise"] += 1
        self.kwargs["act_discrete_with_noise"].append(kwargs)
        return super().act_discrete_with_noise(state, **kwargs)

    def update(self, *args, **kwargs):
        self.calls["update"] += 1
        return super().update(*args, **kwargs)


def cartpole(**kwargs):
    return gym.make("CartPole-v0", **kwargs)


def read_csv(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def read_scalars(directory):
    """``{tag: [(step, value), ...]}`` from the TensorBoard event files in ``directory``."""
    scalars = {}
    for path in sorted(Path(directory).glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 16 + length
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


# -- family defaults ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, family",
    [
        ("DQN", "DQN"),
        ("DQNPer", "DQN"),
        ("RAINBOW", "RAINBOW"),
        ("DDPG", "DDPG"),
        ("DDPGPer", "DDPG"),
        ("HDDPG", "DDPG"),
        ("TD3", "DDPG"),
        ("SAC", "SAC"),
        ("A2C", "A2C"),
        ("PPO", "A2C"),
        ("TRPO", "A2C"),
    ],
)
def test_defaults_come_from_the_nearest_family(name, family):
    cls = getattr(algorithms, name)
    trainer = Trainer(
        cls.__new__(cls), cartpole, progress=False
    )  # the trainer only looks up methods
    expected = getattr(algorithms, family).driver
    assert cls.driver is expected  # inherited from the family
    assert (trainer.act_method, trainer.act_kwargs, trainer.eval_act_method, trainer.store) == (
        expected.act_method,
        expected.act_kwargs,
        expected.eval_act_method,
        expected.store,
    )
    assert (
        trainer.act_kwargs is not expected.act_kwargs
    )  # a copy: the table cannot be changed by accident
    episodic = family in ("A2C", "RAINBOW")  # RAINBOW stores episodes: n-step returns
    assert (trainer.updates_per_step, trainer.updates_per_episode) == (
        (0.0, 1) if episodic else (1.0, 0)
    )


@pytest.mark.parametrize(
    "name, reason",
    [
        ("MADDPG", "several agents"),
        ("A3C", "distributed"),
        ("IMPALA", "distributed"),
        ("DQNApex", "distributed"),
        ("DDPGApex", "distributed"),
    ],
)
def test_algorithms_with_their_own_loop_need_explicit_methods(name, reason):
    cls = getattr(algorithms, name)
    with pytest.raises(
        TypeError,
        match=f"no defaults for {name} .*{reason}.*give act_method, eval_act_method and store",
    ):
        Trainer(cls.__new__(cls), cartpole)
    method = "act_discrete" if hasattr(cls, "act_discrete") else "act"
    trainer = Trainer(
        cls.__new__(cls),
        cartpole,
        act_method=method,
        eval_act_method=method,
        store="transition",
        progress=False,
    )
    assert trainer.act_kwargs == {} and trainer.store == "transition"


def test_explicit_options_override_the_family_defaults():
    ddpg = DDPG.__new__(DDPG)
    trainer = Trainer(
        ddpg,
        gym.make("Pendulum-v1"),
        act_method="act",
        eval_act_method="act_with_noise",
        eval_act_kwargs={"mode": "uniform"},
        updates_per_step=0.25,
        updates_per_episode=2,
    )
    assert trainer.act_kwargs == {}  # the family's noise kwargs belong to the family's act method
    assert (trainer.eval_act_method, trainer.eval_act_kwargs) == (
        "act_with_noise",
        {"mode": "uniform"},
    )
    assert (trainer.updates_per_step, trainer.updates_per_episode) == (0.25, 2)
    trainer = Trainer(
        ddpg, gym.make("Pendulum-v1"), act_kwargs={"mode": "uniform", "noise_param": (-1, 1)}
    )
    assert trainer.act_method == "act_with_noise" and trainer.act_kwargs == {
        "mode": "uniform",
        "noise_param": (-1, 1),
    }


# -- a DQN run and its files ---------------------------------------------------------------------
def test_dqn_run_writes_csv_tensorboard_curve_and_best_checkpoint(tmp_path):
    dqn = make_dqn()
    trainer = Trainer(
        dqn,
        cartpole,
        warmup_steps=50,
        eval_interval=2,
        eval_episodes=2,
        log_dir=tmp_path,
        seed=0,
        progress=False,
    )
    result = trainer.run(6)
    trainer.close()
    assert result.episodes == 6 and len(result.returns) == 6 and result.solved_episode is None
    rows = read_csv(result.paths["csv"])
    assert list(rows[0]) == ["episode", "steps", "return", "smoothed", "eval_return", "seconds"]
    assert [int(r["episode"]) for r in rows] == list(range(1, 7))
    assert [float(r["return"]) for r in rows] == result.returns
    assert [int(r["steps"]) for r in rows] == list(
        np.cumsum(result.returns).astype(int)
    )  # 1 per step
    assert int(rows[-1]["steps"]) == result.steps
    smoothed = result.returns[0]
    for row, value in zip(rows, result.returns):
        smoothed = 0.9 * smoothed + 0.1 * value if row is not rows[0] else value
        assert float(row["smoothed"]) == pytest.approx(smoothed)
    assert [float(r["seconds"]) for r in rows] == sorted(float(r["seconds"]) for r in rows)
    assert [
        (int(r["episode"]), float(r["eval_return"])) for r in rows if r["eval_return"]
    ] == result.eval_returns
    assert [episode for episode, _ in result.eval_returns] == [2, 4, 6]

    best_episode, best = max(result.eval_returns, key=lambda item: (item[1], -item[0]))
    assert result.best_eval_return == best and result.best_version == best_episode
    assert result.paths["checkpoints"] == str(tmp_path / "checkpoints")
    assert (tmp_path / "checkpoints" / f"qnet_target_{best_episode}.pt").exists()

    scalars = read_scalars(result.paths["tensorboard"])
    assert [v for _, v in scalars["train/return"]] == pytest.approx(result.returns)
    assert scalars["eval/return"] == [(e, pytest.approx(v)) for e, v in result.eval_returns]
    # DQN's update returns one loss: logged as the mean of the episode's updates (none before warm-up)
    assert [step for step, _ in scalars["train/loss"]] == [
        int(r["episode"]) for r in rows if int(r["steps"]) > 50
    ]
    assert "train/policy_value" not in scalars

    with Image.open(result.paths["curve"]) as image:
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoints",
        "learning_curve.png",
        "progress.csv",
        "tensorboard",
    ]


def test_best_checkpoint_loads_into_a_fresh_framework_with_identical_greedy_actions(tmp_path):
    dqn = make_dqn()
    result = Trainer(
        dqn,
        cartpole,
        warmup_steps=20,
        eval_interval=3,
        eval_episodes=1,
        log_dir=str(tmp_path),
        seed=1,
        progress=False,
    ).run(3)
    assert result.best_version == 3
    other = make_dqn()
    torch.manual_seed(5)
    other.qnet.net[0].weight.data.normal_()  # make sure loading changes something
    state = {"state": torch.randn(256, 4)}
    assert not torch.equal(
        other.criticize(state, use_target=True), dqn.criticize(state, use_target=True)
    )
    other.load(result.paths["checkpoints"], version=result.best_version)
    # DQN saves its target network (Machin's convention); loading copies it into the online one too
    assert torch.equal(
        other.criticize(state, use_target=True), dqn.criticize(state, use_target=True)
    )
    assert torch.equal(
        other.act_discrete(state, use_target=True), dqn.act_discrete(state, use_target=True)
    )
    assert torch.equal(other.act_discrete(state), dqn.act_discrete(state, use_target=True))


def test_a_checkpoint_is_written_only_when_the_evaluation_improves(tmp_path, monkeypatch):
    dqn = make_dqn()
    returns = iter([10.0, 30.0, 20.0, 30.0, 40.0])
    trainer = Trainer(
        dqn, cartpole, eval_interval=1, log_dir=tmp_path, tensorboard=False, seed=0, progress=False
    )
    monkeypatch.setattr(trainer, "evaluate", lambda: next(returns))
    saved = []
    monkeypatch.setattr(dqn, "save", lambda model_dir, version: saved.append(version))
    result = trainer.run(5)
    assert saved == [1, 2, 5] and result.best_version == 5 and result.best_eval_return == 40.0
    assert [float(r["eval_return"]) for r in read_csv(result.paths["csv"])] == [10, 30, 20, 30, 40]


def test_evaluation_acts_greedily_and_stores_nothing():
    dqn = CountingDQN(
        QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), epsilon_decay=1.0
    )
    trainer = Trainer(
        dqn, cartpole, eval_episodes=3, eval_act_kwargs={"use_target": True}, seed=0, progress=False
    )
    mean = trainer.evaluate()
    assert dqn.calls["act_discrete_with_noise"] == 0 and dqn.calls["act_discrete"] > 0
    assert all(kwargs == {"use_target": True} for kwargs in dqn.kwargs["act_discrete"])
    assert dqn.replay_buffer.size() == 0 and dqn.calls["update"] == 0
    # greedy, seeded evaluation is repeatable, while epsilon is still 1 for training
    assert trainer.evaluate() == mean and dqn.epsilon == 1.0
    assert trainer.evaluate(1) == trainer.evaluate(1)


def test_training_explores_and_evaluation_inside_a_run_does_not():
    dqn = CountingDQN(
        QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), epsilon_decay=1.0
    )
    result = Trainer(dqn, cartpole, eval_interval=2, eval_episodes=2, seed=0, progress=False).run(4)
    assert dqn.calls["act_discrete_with_noise"] == result.steps
    assert dqn.calls["act_discrete"] > 0 and dqn.replay_buffer.size() == result.steps


def test_off_policy_updates_follow_warmup_and_updates_per_step():
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    result = Trainer(
        dqn,
        cartpole,
        warmup_steps=30,
        updates_per_step=0.5,
        eval_interval=0,
        seed=0,
        progress=False,
    ).run(3)
    assert dqn.replay_buffer.size() == result.steps
    assert dqn.calls["update"] == (result.steps - 30) // 2


def test_updates_per_episode_in_transition_mode():
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    Trainer(
        dqn,
        cartpole,
        updates_per_step=0,
        updates_per_episode=3,
        eval_interval=0,
        seed=0,
        progress=False,
    ).run(4)
    assert dqn.calls["update"] == 12


def test_seeded_runs_repeat_and_the_seed_picks_the_episode_starts():
    def starts(seed):
        trainer = Trainer(
            make_dqn(),
            cartpole,
            eval_interval=0,
            seed=seed,
            progress=False,
            obs_to_state=lambda obs: seen.append(obs) or torch.as_tensor(obs)[None],
        )
        seen.clear()
        trainer.run(3)
        return trainer, [o for o in seen]

    seen = []
    first, observations = starts(7)
    _, again = starts(7)
    assert all(np.array_equal(a, b) for a, b in zip(observations, again)) and len(
        observations
    ) == len(again)
    expected = cartpole().reset(seed=7 + 1)[0]
    assert np.array_equal(observations[0], expected)


def test_steps_limit_ends_after_the_episode_that_reaches_it():
    result = Trainer(make_dqn(), cartpole, eval_interval=0, seed=0, progress=False).run(steps=50)
    assert result.steps >= 50 and result.steps - result.returns[-1] < 50
    both = Trainer(make_dqn(), cartpole, eval_interval=0, seed=0, progress=False).run(
        2, steps=10**6
    )
    assert both.episodes == 2


def test_ddpg_on_pendulum_uses_noisy_continuous_actions_within_bounds(tmp_path):
    torch.manual_seed(0)
    ddpg = DDPG(
        Actor(hidden=8),
        Actor(hidden=8),
        Critic(hidden=8),
        Critic(hidden=8),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=16,
    )
    trainer = Trainer(
        ddpg,
        gym.make("Pendulum-v1"),
        warmup_steps=100,
        eval_interval=2,
        eval_episodes=1,
        log_dir=tmp_path,
        seed=0,
        progress=False,
    )
    assert trainer.act_method == "act_with_noise" and trainer.eval_act_method == "act"
    result = trainer.run(2)
    assert result.steps == 400 and len(result.eval_returns) == 1 and result.best_version == 2
    _, (state, action, *_) = ddpg.replay_buffer.sample_batch(400, sample_method="all")
    assert action["action"].shape == (400, 1) and state["state"].shape == (400, 3)
    assert action["action"].abs().max() > 0  # noisy actions were stored, not what the env received
    scalars = read_scalars(result.paths["tensorboard"])
    assert {"train/policy_value", "train/value_loss"} <= set(
        scalars
    ) and "train/loss" not in scalars
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "actor_target_2.manifest.json",
        "actor_target_2.pt",
        "critic_target_2.pt",
    ]


def test_random_steps_play_random_actions_first_then_the_act_method():
    dqn = make_dqn(CountingDQN)
    trainer = Trainer(
        dqn, cartpole, random_steps=30, warmup_steps=30, eval_interval=0, seed=0, progress=False
    )
    torch.manual_seed(1)
    trainer.run(steps=60)
    steps = trainer._steps
    assert (
        dqn.calls["act_discrete_with_noise"] == steps - 30
    )  # the first 30 actions did not ask the network
    _, (action,) = dqn.replay_buffer.sample_batch(
        steps, sample_method="all", sample_attrs=["action"]
    )
    first = action["action"][:30]
    assert (
        first.dtype == torch.int64
        and first.shape == (30, 1)
        and set(first.view(-1).tolist()) == {0, 1}
    )
    torch.manual_seed(1)
    assert torch.equal(
        first, torch.randint(2, (30, 1))
    )  # drawn from torch's generator, one per step


def test_random_steps_on_a_box_space_and_with_action_to_env():
    torch.manual_seed(0)
    ddpg = DDPG(
        Actor(hidden=8),
        Actor(hidden=8),
        Critic(hidden=8),
        Critic(hidden=8),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=16,
    )
    trainer = Trainer(
        ddpg,
        gym.make("Pendulum-v1"),
        random_steps=200,
        warmup_steps=200,
        eval_interval=0,
        progress=False,
    )
    trainer.run(1)
    _, (action,) = ddpg.replay_buffer.sample_batch(
        200, sample_method="all", sample_attrs=["action"]
    )
    random = action["action"]
    assert random.dtype == torch.float32 and random.shape == (200, 1)
    assert -2 <= random.min() < -1.5 and 1.5 < random.max() <= 2  # uniform over Pendulum's [-2, 2]
    with pytest.raises(TypeError, match="random_steps with action_to_env needs random_action"):
        Trainer(
            ddpg, gym.make("Pendulum-v1"), random_steps=10, action_to_env=lambda a: 2 * a.numpy()[0]
        )
    halves = []
    trainer = Trainer(
        ddpg,
        gym.make("Pendulum-v1"),
        random_steps=5,
        eval_interval=0,
        progress=False,
        action_to_env=lambda a: 2 * a.numpy()[0],
        random_action=lambda: halves.append(1) or torch.full((1, 1), 0.5),
    )
    trainer.run(steps=5)
    assert len(halves) == 5


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"random_steps": -1}, ValueError, "random_steps must be an integer >= 0, got -1"),
        (
            {"random_action": lambda: 0},
            ValueError,
            "random_action is only used with random_steps > 0",
        ),
        ({"random_steps": 5, "random_action": 3}, TypeError, "random_action must be a function"),
        (
            {"random_steps": 5, "store": "episode"},
            ValueError,
            "random_steps .* needs store='transition'",
        ),
    ],
)
def test_bad_random_step_options(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(make_dqn(), cartpole, **kwargs)


class _UnboundedEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (4,))
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,))


def test_random_steps_need_one_environment_and_a_space_to_draw_from():
    with pytest.raises(ValueError, match="random_steps .* needs a single environment"):
        Trainer(
            make_dqn(),
            ParallelWrapperDummy([lambda i: cartpole()] * 2),
            eval_env=cartpole,
            random_steps=5,
        )
    with pytest.raises(
        TypeError, match=r"random_steps needs random_action for the action space Box\(-inf, inf"
    ):
        Trainer(make_dqn(), _UnboundedEnv(), random_steps=5)
    trainer = Trainer(
        make_dqn(), _UnboundedEnv(), random_steps=5, random_action=lambda: torch.zeros(1, 1)
    )
    assert trainer.random_action().shape == (1, 1)


class CountingPPO(PPO):
    """Keeps every stored episode and counts its updates."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.episodes, self.updates = [], 0

    def store_episode(self, episode):
        self.episodes.append(episode)
        super().store_episode(episode)

    def update(self, *args, **kwargs):
        self.updates += 1
        return super().update(*args, **kwargs)


def counting_ppo():
    torch.manual_seed(0)
    return CountingPPO(
        CategoricalActor(4, 2), ValueCritic(4), torch.optim.Adam, nn.MSELoss(), batch_size=8
    )


def test_ppo_stores_whole_episodes_with_truncation_and_updates_once_per_episode():
    ppo = counting_ppo()
    env = gym.make("CartPole-v0", max_episode_steps=12)
    result = Trainer(ppo, env, eval_interval=0, seed=0, progress=False).run(3)
    assert [len(e) for e in ppo.episodes] == [int(r) for r in result.returns]
    for episode in ppo.episodes:
        last = episode[-1]
        assert last["truncated"] == (len(episode) == 12 and not last["terminal"])
        assert not any(step["truncated"] or step["terminal"] for step in episode[:-1])
    assert any(e[-1]["truncated"] for e in ppo.episodes)
    assert ppo.replay_buffer.size() == 0  # PPO clears its buffer in every update
    assert ppo.updates == 3


def test_state_key_and_converters():
    class ObsQNet(QNet):
        def forward(self, obs):
            return self.net(obs)

    received = []
    dqn = DQN(ObsQNet(hidden=8), ObsQNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=4)
    trainer = Trainer(
        dqn,
        cartpole,
        state_key="obs",
        eval_interval=0,
        seed=0,
        progress=False,
        action_to_env=lambda action: received.append(action) or 0,
    )
    result = trainer.run(1)
    assert len(received) == result.steps and all(a.shape == (1, 1) for a in received)
    _, (state, *_) = dqn.replay_buffer.sample_batch(1, sample_method="all")
    assert list(state) == ["obs"]
    # obs_to_state may return the whole state dict
    dqn = make_dqn(hidden=8)
    Trainer(
        dqn,
        cartpole,
        obs_to_state=lambda obs: {"state": torch.zeros(1, 4)},
        eval_interval=0,
        progress=False,
    ).run(1)
    _, (state, *_) = dqn.replay_buffer.sample_batch(1, sample_method="all")
    assert state["state"].shape == (dqn.replay_buffer.size(), 4) and not state["state"].any()


def test_default_action_conversion_respects_discrete_start():
    seen = []

    class Recorder(gym.Wrapper):
        def step(self, action):
            seen.append(action)
            return self.env.step(action - 1)

    env = Recorder(cartpole())
    env.action_space = gym.spaces.Discrete(2, start=1)
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss())
    Trainer(dqn, env, eval_interval=0, seed=0, progress=False).run(2)
    assert seen and set(seen) <= {1, 2} and all(isinstance(a, int) for a in seen)


def test_solved_reward_stops_early():
    result = Trainer(
        make_dqn(),
        cartpole,
        solved_reward=1.0,
        solved_repeat=3,
        eval_interval=0,
        seed=0,
        progress=False,
    ).run(50)
    assert result.solved_episode == 3 and result.episodes == 3
    result = Trainer(
        make_dqn(), cartpole, solved_reward=10**6, eval_interval=0, seed=0, progress=False
    ).run(3)
    assert result.solved_episode is None and result.episodes == 3


def test_without_log_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = Trainer(
        make_dqn(), cartpole, eval_interval=1, eval_episodes=1, seed=0, progress=False
    ).run(2)
    assert result.paths == {} and result.best_version is None and list(tmp_path.iterdir()) == []
    assert len(result.eval_returns) == 2 and result.best_eval_return == max(
        v for _, v in result.eval_returns
    )


def test_save_env_run_directory_and_gif(tmp_path):
    save_env = SaveEnv(tmp_path / "runs")
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=2,
        eval_episodes=1,
        log_dir=save_env,
        seed=0,
        gif_env=lambda: cartpole(render_mode="rgb_array"),
        progress=False,
    )
    result = trainer.run(2)
    trainer.close()
    assert result.paths["csv"] == str(Path(save_env.get_trial_train_log_dir()) / "progress.csv")
    assert result.paths["tensorboard"] == save_env.get_trial_train_log_dir()
    assert result.paths["checkpoints"] == save_env.get_trial_model_dir()
    assert result.paths["curve"] == str(Path(save_env.get_trial_image_dir()) / "learning_curve.png")
    assert len(read_csv(result.paths["csv"])) == 2
    assert (Path(save_env.get_trial_model_dir()) / "qnet_target_2.pt").exists()
    assert read_scalars(result.paths["tensorboard"])["train/return"]
    with Image.open(result.paths["gif"]) as gif:
        assert gif.format == "GIF" and gif.size == (600, 400) and gif.n_frames > 1


def test_progress_bar_shows_the_smoothed_return(capsys):
    Trainer(make_dqn(), cartpole, eval_interval=0, seed=0).run(3)
    err = capsys.readouterr().err
    assert "3/3" in err and "smoothed=" in err and "episode" in err
    Trainer(make_dqn(), cartpole, eval_interval=0, seed=0).run(steps=30)
    assert "30/30" in capsys.readouterr().err


def test_environments_made_by_the_trainer_are_closed_and_given_ones_are_not():
    closed = []

    class Closing(gym.Wrapper):
        def close(self):
            closed.append(self)
            super().close()

    made = []

    def factory():
        made.append(Closing(cartpole()))
        return made[-1]

    with Trainer(make_dqn(), factory, progress=False) as trainer:
        assert len(made) == 2 and trainer.env is made[0] and trainer.eval_env is made[1]
        assert closed == []
    assert closed == made
    given = Closing(cartpole())
    trainer = Trainer(make_dqn(), given, progress=False)
    trainer.close()
    assert trainer.env is given and trainer.eval_env is given and closed == made


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"store": "batch"}, ValueError, "store must be 'transition' or 'episode', got 'batch'"),
        ({"act_method": "act_fast"}, ValueError, "act_method 'act_fast' is not a method of DQN"),
        (
            {"eval_act_method": "greedy"},
            ValueError,
            "eval_act_method 'greedy' is not a method of DQN",
        ),
        ({"eval_episodes": 0}, ValueError, "eval_episodes must be an integer >= 1, got 0"),
        ({"eval_interval": 2.5}, ValueError, "eval_interval must be an integer >= 0, got 2.5"),
        ({"warmup_steps": -1}, ValueError, "warmup_steps must be an integer >= 0, got -1"),
        (
            {"updates_per_step": -0.5},
            ValueError,
            "updates_per_step must be a number >= 0, got -0.5",
        ),
        (
            {"updates_per_episode": True},
            ValueError,
            "updates_per_episode must be an integer >= 0, got True",
        ),
        ({"hidden_key": "hidden"}, ValueError, "hidden_key needs initial_hidden"),
        ({"initial_hidden": torch.zeros(1, 4)}, ValueError, "only used with hidden_key"),
        ({"smoothing": 1.0}, ValueError, r"smoothing must be a number in \[0, 1\), got 1.0"),
        ({"solved_repeat": 0}, ValueError, "solved_repeat must be an integer >= 1, got 0"),
        ({"solved_reward": "195"}, ValueError, "solved_reward must be a number, got '195'"),
        ({"seed": -1}, ValueError, "seed must be an integer >= 0, got -1"),
        ({"log_dir": 3}, TypeError, "log_dir must be a path, a SaveEnv or None, got int"),
        ({"gif_env": cartpole}, ValueError, "gif_env needs a log_dir"),
        (
            {"gif_env": cartpole, "log_dir": "unused"},
            ValueError,
            "gif_env must be made with render_mode='rgb_array', got render_mode=None",
        ),
        (
            {"eval_env": 3},  # an id is made with gymnasium.make (see test_newcomer.py)
            TypeError,
            "eval_env must be a gymnasium.Env, a function making one or a gymnasium id, got int",
        ),
        (
            {"eval_env": lambda: 3},
            TypeError,
            "the function given as eval_env must return a gymnasium.Env, got int",
        ),
    ],
)
def test_bad_options(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(make_dqn(), cartpole, **kwargs)


def test_bad_environments_and_run_limits():
    with pytest.raises(
        TypeError, match="no defaults for object .*give act_method, eval_act_method and store"
    ):
        Trainer(object(), cartpole)
    with pytest.raises(TypeError, match="give action_to_env for the action space MultiBinary"):
        Trainer(make_dqn(), _MultiBinaryEnv())
    trainer = Trainer(make_dqn(), cartpole, progress=False)
    with pytest.raises(ValueError, match="run needs a limit: give episodes, steps or both"):
        trainer.run()
    with pytest.raises(ValueError, match="episodes must be an integer >= 1, got 0"):
        trainer.run(0)
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 1.5"):
        trainer.run(steps=1.5)
    with pytest.raises(ValueError, match="episodes must be an integer >= 1, got -2"):
        trainer.evaluate(-2)


class _MultiBinaryEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (4,))
    action_space = gym.spaces.MultiBinary(2)


def test_updates_per_step_in_episode_mode_follow_each_stored_episode():
    ppo = counting_ppo()
    env = gym.make("CartPole-v0", max_episode_steps=12)
    updates_after_episode = []
    original = ppo.store_episode
    ppo.store_episode = lambda episode: (
        original(episode),
        updates_after_episode.append(ppo.updates),
    )
    result = Trainer(
        ppo,
        env,
        updates_per_step=0.25,
        updates_per_episode=0,
        warmup_steps=10,
        eval_interval=0,
        seed=0,
        progress=False,
    ).run(4)
    due, expected = 0.0, []
    for steps in np.cumsum(
        [int(r) for r in result.returns]
    ):  # updates made by the end of each episode
        due = max(0, steps - 10) * 0.25
        expected.append(int(due))
    assert ppo.updates == expected[-1]
    assert updates_after_episode == [0] + expected[:-1]  # none while an episode is still running


# -- recurrent networks -----------------------------------------------------------------------
class CountingGRU(nn.Module):
    """``forward(state, hidden) -> (q, hidden + 1)``: the hidden state counts the steps of an episode."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 2)
        self.given = []

    def forward(self, state, hidden=None):
        self.given.append(hidden.clone())
        return self.q(state), hidden + 1


def make_r2d1(**kwargs):
    from machin.frame.algorithms import R2D1

    torch.manual_seed(0)
    return R2D1(
        CountingGRU(),
        CountingGRU(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=4,
        sequence_length=2,
        burn_in=1,
        n_step=1,
        **kwargs,
    )


def test_r2d1_needs_the_recurrent_options():
    with pytest.raises(
        TypeError, match="R2D1 acts with a recurrent network: give hidden_key and initial_hidden"
    ):
        Trainer(make_r2d1(), cartpole)


def test_a_recurrent_network_gets_its_hidden_state_back_in_training_and_evaluation():
    r2d1 = make_r2d1()
    stored = []
    original = r2d1.store_episode
    r2d1.store_episode = lambda episode: (stored.append(episode), original(episode))
    trainer = Trainer(
        r2d1,
        cartpole,
        hidden_key="hidden",
        initial_hidden=torch.zeros(1, 1),
        eval_interval=2,
        eval_episodes=1,
        seed=0,
        progress=False,
    )
    assert (trainer.act_method, trainer.eval_act_method, trainer.store) == (
        "act_discrete_with_noise",
        "act_discrete",
        "episode",
    )
    result = trainer.run(2)
    assert len(stored) == 2 and result.eval_returns
    for episode in stored:  # each episode starts from the initial state and counts its steps
        for t, step in enumerate(episode):
            assert step["state"]["hidden"].tolist() == [[float(t)]]
            assert step["next_state"]["hidden"].tolist() == [[float(t + 1)]]
    # the evaluation episode fed the hidden state back too: 0, 1, 2, ... from its start
    evaluation = [h.item() for h in r2d1.qnet.given[-int(result.eval_returns[-1][1]) :]]
    assert evaluation == [float(t) for t in range(len(evaluation))]
    assert r2d1.replay_buffer.size() == result.steps


def test_a_recurrent_network_on_a_group():
    r2d1 = make_r2d1()
    with cartpoles(2) as envs:
        result = Trainer(
            r2d1,
            envs,
            hidden_key="hidden",
            initial_hidden=torch.zeros(1, 1),
            eval_interval=0,
            updates_per_step=0.5,
            updates_per_episode=0,
            seed=0,
            progress=False,
        ).run(4)
    assert result.episodes == 4 and r2d1.replay_buffer.size() >= sum(int(r) for r in result.returns)
    batch = r2d1.replay_buffer.sample_sequences(4)
    assert batch.hidden is not None and batch.hidden.shape == (4, 1)


# -- a group of environments ------------------------------------------------------------------
def cartpoles(n=3, **kwargs):
    return ParallelWrapperDummy([lambda i: gym.make("CartPole-v0", **kwargs)] * n)


def test_a_group_is_sampled_with_one_act_call_per_step_and_logged_per_episode(tmp_path):
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    with cartpoles(3) as envs:
        trainer = Trainer(
            dqn,
            envs,
            eval_env=cartpole,
            eval_interval=4,
            eval_episodes=1,
            warmup_steps=20,
            updates_per_step=0.5,
            log_dir=str(tmp_path),
            tensorboard=False,
            seed=0,
            progress=False,
        )
        result = trainer.run(8)
        sampler = trainer.sampler
    assert result.episodes == 8 and len(result.returns) == 8
    # one exploring act call per group step, for all three environments at once
    assert dqn.calls["act_discrete_with_noise"] * 3 == sampler.total_steps == result.steps
    assert dqn.replay_buffer.size() == result.steps  # stored step by step, in progress episodes too
    assert all(t == int(t) and t >= 8 for t in result.returns)  # CartPole: 1 per step
    # the per-step updates follow the same schedule as with one environment
    assert dqn.calls["update"] == pytest.approx((result.steps - 20) / 2, abs=3)
    assert [e for e, _ in result.eval_returns] == [4, 8] and dqn.calls["act_discrete"] > 0
    rows = read_csv(result.paths["csv"])
    assert [int(r["episode"]) for r in rows] == list(range(1, 9))
    assert [float(r["return"]) for r in rows] == result.returns
    steps = [int(r["steps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] == result.steps


def test_a_group_stores_episodes_and_updates_once_per_finished_episode():
    ppo = counting_ppo()
    envs = SyncVectorEnv([lambda: gym.make("CartPole-v0", max_episode_steps=12)] * 2)
    result = Trainer(ppo, envs, eval_interval=0, seed=0, progress=False).run(5)
    envs.close()
    assert result.episodes == 5 and ppo.updates == 5
    assert [len(e) for e in ppo.episodes[:5]] == [int(r) for r in result.returns]
    assert any(e[-1]["truncated"] for e in ppo.episodes)


def test_a_group_with_a_steps_limit_and_the_progress_bar(capsys):
    with cartpoles(2) as envs:
        result = Trainer(make_dqn(), envs, eval_interval=0, seed=0).run(steps=60)
    assert result.steps >= 60
    assert "60/60" in capsys.readouterr().err


def test_a_group_needs_an_evaluation_environment_and_makes_its_own_states():
    with cartpoles(2) as envs:
        with pytest.raises(ValueError, match="give eval_env .* or eval_interval=0"):
            Trainer(make_dqn(), envs)
        with pytest.raises(ValueError, match="obs_to_state only applies to a single environment"):
            Trainer(make_dqn(), envs, eval_env=cartpole, obs_to_state=lambda obs: obs)
        trainer = Trainer(make_dqn(), envs, eval_interval=0, progress=False)
        with pytest.raises(ValueError, match="no evaluation environment"):
            trainer.evaluate()
        trainer.close()
        assert (
            envs.size() == 2 and envs.reset() is not None
        )  # a group is never closed by the trainer


# -- learning -----------------------------------------------------------------------------------
@pytest.mark.learning
def test_dqn_learns_cartpole_through_the_trainer(tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    dqn = DQN(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    start, cpu = time.time(), time.process_time()
    result = Trainer(
        dqn,
        cartpole,
        warmup_steps=500,
        eval_interval=20,
        eval_episodes=3,
        solved_reward=150,
        log_dir=str(tmp_path),
        seed=0,
        progress=False,
    ).run(300)
    print(
        f"DQN through the Trainer: solved at episode {result.solved_episode} ({result.steps} steps, "
        f"{time.time() - start:.1f} s wall, {time.process_time() - cpu:.1f} s CPU), best evaluation "
        f"{result.best_eval_return:.1f} at episode {result.best_version}"
    )
    assert result.solved_episode is not None
    assert result.best_eval_return >= 150


@pytest.mark.learning
def test_dqn_learns_cartpole_from_a_group_of_four_environments():
    torch.manual_seed(0)
    np.random.seed(0)
    dqn = DQN(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    start, cpu = time.time(), time.process_time()
    with cartpoles(4) as envs:
        result = Trainer(
            dqn,
            envs,
            eval_env=cartpole,
            warmup_steps=500,
            eval_interval=40,
            eval_episodes=3,
            solved_reward=150,
            seed=0,
            progress=False,
        ).run(400)
    print(
        f"DQN through the Trainer on 4 environments: solved at episode {result.solved_episode} "
        f"({result.steps} steps, {time.time() - start:.1f} s wall, {time.process_time() - cpu:.1f} s CPU), "
        f"best evaluation {result.best_eval_return:.1f}"
    )
    assert result.solved_episode is not None


# A recurrent agent learning through the Trainer (hidden_key, initial_hidden, whole episodes stored):
# tests/frame/algorithms/test_r2d1.py::test_r2d1_learns_cartpole_without_velocities_where_dqn_cannot
# trains R2D1 with this Trainer.


# -- bursts of updates ------------------------------------------------------------------------
class TimedDQN(DQN):
    """Records the number of stored steps at each update (in transition mode: the trainer's step count)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.update_at = []

    def update(self, *args, **kwargs):
        self.update_at.append(self.replay_buffer.size())
        return super().update(*args, **kwargs)


def timed_dqn():
    torch.manual_seed(0)
    return TimedDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)


def test_bursts_every_train_freq_steps_after_the_warmup():
    dqn = timed_dqn()
    trainer = Trainer(
        dqn,
        cartpole,
        train_freq=4,
        gradient_steps=3,
        warmup_steps=10,
        eval_interval=0,
        seed=0,
        progress=False,
    )
    assert (trainer.updates_per_step, trainer.updates_per_episode) == (0.0, 0)
    result = trainer.run(steps=60)
    expected = [
        step for step in range(12, result.steps + 1, 4) for _ in range(3)
    ]  # 12 is the first burst > 10
    assert dqn.update_at == expected and len(expected) >= 36


def test_burst_defaults_and_as_many_updates_as_steps():
    dqn = timed_dqn()
    trainer = Trainer(dqn, cartpole, gradient_steps=2, eval_interval=0, seed=0, progress=False)
    assert trainer.train_freq == (1, "step") and trainer.gradient_steps == 2
    result = trainer.run(steps=10)
    assert dqn.update_at == [step for step in range(1, result.steps + 1) for _ in range(2)]
    trainer = Trainer(timed_dqn(), cartpole, train_freq=5, eval_interval=0, progress=False)
    assert trainer.train_freq == (5, "step") and trainer.gradient_steps == 1
    # every second episode: as many updates as steps taken since the previous burst
    dqn = timed_dqn()
    result = Trainer(
        dqn,
        cartpole,
        train_freq=[2, "episode"],
        gradient_steps=-1,
        warmup_steps=5,
        eval_interval=0,
        seed=0,
        progress=False,
    ).run(6)
    ends = np.cumsum([int(r) for r in result.returns])  # CartPole: one reward per step
    expected, mark = [], 0
    for end in ends[1::2]:
        expected += [int(end)] * int(end - mark)
        mark = end
    assert dqn.update_at == expected


def test_bursts_on_a_group_count_the_steps_of_all_environments():
    dqn = timed_dqn()
    with cartpoles(3) as envs:
        result = Trainer(
            dqn,
            envs,
            train_freq=5,
            gradient_steps=2,
            warmup_steps=9,
            eval_interval=0,
            seed=0,
            progress=False,
        ).run(steps=60)
    expected = []
    for step in range(3, result.steps + 1, 3):  # a group step takes 3 transitions
        crossed = step // 5 - (step - 3) // 5
        if step > 9:
            expected += [step] * (2 * crossed)
    assert dqn.update_at == expected and 15 in expected and 12 in expected


def test_bursts_in_episode_mode_follow_each_stored_episode():
    ppo = counting_ppo()
    env = gym.make("CartPole-v0", max_episode_steps=12)
    updates_after_episode = []
    original = ppo.store_episode
    ppo.store_episode = lambda episode: (
        original(episode),
        updates_after_episode.append(ppo.updates),
    )
    trainer = Trainer(
        ppo, env, train_freq=5, gradient_steps=2, eval_interval=0, seed=0, progress=False
    )
    assert trainer.updates_per_episode == 0  # bursts replace the family's update per episode
    result = trainer.run(4)
    due = [2 * (int(steps) // 5) for steps in np.cumsum([int(r) for r in result.returns])]
    assert ppo.updates == due[-1] and updates_after_episode == [0] + due[:-1]


# -- evaluation every N steps -----------------------------------------------------------------
def test_evaluation_every_n_steps_on_a_separate_environment(tmp_path):
    dqn = make_dqn()
    trainer = Trainer(
        dqn,
        cartpole,
        eval_every_steps=25,
        eval_episodes=1,
        log_dir=tmp_path,
        seed=0,
        progress=False,
    )
    assert trainer.eval_interval == 0
    at, values = [], iter([5.0, 9.0, 7.0, 12.0, 3.0])
    trainer.evaluate = lambda: at.append(trainer._steps) or next(values)
    result = trainer.run(steps=100)
    assert at == result.eval_steps == [25, 50, 75, 100][: len(at)] and len(at) == result.steps // 25
    assert [v for _, v in result.eval_returns] == [5.0, 9.0, 7.0, 12.0][: len(at)]
    ends = np.cumsum([int(r) for r in result.returns])
    assert [e for e, _ in result.eval_returns] == [
        int(np.sum(ends < s)) for s in at
    ]  # episodes finished by then
    assert (
        result.best_version == 100 and result.best_eval_return == 12.0
    )  # checkpoints named by the step
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("qnet_target_*.pt")) == [
        "qnet_target_100.pt",
        "qnet_target_25.pt",
        "qnet_target_50.pt",
    ]
    assert read_scalars(result.paths["tensorboard"])["eval/return"] == [
        (25, 5.0),
        (50, 9.0),
        (75, 7.0),
        (100, 12.0),
    ]
    rows = read_csv(
        result.paths["csv"]
    )  # each row shows the last evaluation made during its episode
    shown = [(int(r["steps"]), float(r["eval_return"])) for r in rows if r["eval_return"]]
    expected = {}
    for step, (_, value) in zip(at, result.eval_returns):
        expected[int(ends[np.searchsorted(ends, step)])] = value
    assert shown == sorted(expected.items())


def test_evaluation_every_n_steps_on_the_training_environment_waits_for_the_episode_end():
    env = cartpole()
    trainer = Trainer(make_dqn(), env, eval_every_steps=15, eval_episodes=1, seed=0, progress=False)
    assert trainer.eval_env is env
    at = []
    trainer.evaluate = lambda: at.append(trainer._steps) or 1.0
    result = trainer.run(6)
    ends = [0] + [int(e) for e in np.cumsum([int(r) for r in result.returns])]
    expected = [
        end for start, end in zip(ends, ends[1:]) if end // 15 > start // 15
    ]  # a multiple inside
    assert at == result.eval_steps == expected and expected


def test_evaluation_every_n_steps_on_a_group():
    with cartpoles(3) as envs:
        trainer = Trainer(
            make_dqn(),
            envs,
            eval_env=cartpole,
            eval_every_steps=10,
            eval_episodes=1,
            seed=0,
            progress=False,
        )
        result = trainer.run(steps=61)
    # a group step takes 3 transitions: one evaluation at the step that reaches or passes each multiple of 10
    expected = [step for step in range(3, result.steps + 1, 3) if step // 10 > (step - 3) // 10]
    assert result.eval_steps == expected and expected[:4] == [12, 21, 30, 42]
    assert len(result.eval_returns) == len(result.eval_steps) and result.steps >= 61


def test_episode_evaluations_record_their_steps_too():
    result = Trainer(
        make_dqn(), cartpole, eval_interval=2, eval_episodes=1, seed=0, progress=False
    ).run(4)
    ends = np.cumsum([int(r) for r in result.returns])
    assert result.eval_steps == [int(ends[1]), int(ends[3])]


# -- rollouts ---------------------------------------------------------------------------------
class RolloutPPO(CountingPPO):
    """Also records the number of stored steps at each update."""

    def update(self, *args, **kwargs):
        self.sizes = getattr(self, "sizes", []) + [self.replay_buffer.size()]
        return super().update(*args, **kwargs)


def rollout_ppo():
    torch.manual_seed(0)
    return RolloutPPO(
        CategoricalActor(4, 2),
        ValueCritic(4),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=8,
        actor_update_times=1,
        critic_update_times=1,
    )


def test_rollouts_on_one_environment_continue_episodes_and_update_once_each():
    ppo = rollout_ppo()
    trainer = Trainer(
        ppo,
        lambda: gym.make("CartPole-v0", max_episode_steps=12),
        rollout_steps=16,
        eval_interval=0,
        seed=0,
        progress=False,
    )
    assert (trainer.updates_per_step, trainer.updates_per_episode) == (0.0, 0)
    result = trainer.run(steps=40)
    assert (
        result.steps == 48 and ppo.updates == 3 and ppo.sizes == [16, 16, 16]
    )  # ends after the third rollout
    episodes = ppo.episodes
    assert sum(len(e) for e in episodes) == 48
    cuts = [e for e in episodes if not e[-1]["terminal"] and not e[-1]["truncated"]]
    assert 1 <= len(cuts) <= 3  # at most one tail per rollout
    # joined at the cuts, the pieces make whole episodes; the finished ones are the logged returns
    joined, current = [], []
    for piece in episodes:
        if current:
            assert torch.equal(
                piece[0]["state"]["state"], current[-1]["next_state"]["state"]
            )  # continues
        current += piece
        if piece[-1]["terminal"] or piece[-1]["truncated"]:
            joined.append(current)
            current = []
    assert [
        sum(t["reward"] for t in e) for e in joined
    ] == result.returns  # all that ended, the last rollout's too
    assert all(len(e) <= 12 for e in joined) and any(e[-1]["truncated"] for e in joined)
    first = cartpole().reset(seed=1)[0]  # training episode i starts from seed + i
    assert np.allclose(episodes[0][0]["state"]["state"][0].numpy(), first)


def test_rollouts_on_a_group_and_the_episodes_limit():
    ppo = rollout_ppo()
    with cartpoles(2, max_episode_steps=10) as envs:
        result = Trainer(ppo, envs, rollout_steps=8, eval_interval=0, seed=0, progress=False).run(5)
    # both environments end an episode at steps 10, 20 and 30: the fifth ends in the fourth rollout
    assert result.returns == [10.0] * 5 and result.episodes == 5
    assert ppo.updates == 4 and ppo.sizes == [16] * 4 and result.steps == 64
    assert ppo.replay_buffer.size() == 0  # the last rollout was trained on before the run ended


def test_rollouts_with_step_evaluation_and_the_shared_environment_rule():
    ppo = rollout_ppo()
    trainer = Trainer(
        ppo,
        lambda: gym.make("CartPole-v0", max_episode_steps=20),
        rollout_steps=10,
        eval_every_steps=15,
        eval_episodes=1,
        seed=0,
        progress=False,
    )
    result = trainer.run(steps=45)
    assert result.eval_steps == [15, 30, 45] and ppo.updates == 5
    with pytest.raises(ValueError, match="rollout_steps keeps episodes running .* give eval_env"):
        Trainer(rollout_ppo(), cartpole(), rollout_steps=10)
    Trainer(rollout_ppo(), cartpole(), rollout_steps=10, eval_interval=0)  # no evaluation: fine


# -- progress of the algorithm's schedules ----------------------------------------------------
class ScheduledDQN(TimedDQN):
    """Anneals epsilon from 1 to 0.04 over 16 % of training, and records every call in order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = []

    def set_progress(self, progress):
        from machin.utils.schedules import LinearSchedule, apply_schedules

        self.events.append(("progress", progress))
        apply_schedules(self, progress, {"epsilon": LinearSchedule(1.0, 0.04, 0.16)})

    def act_discrete_with_noise(self, state, **kwargs):
        self.events.append(("act", self.epsilon))
        return super().act_discrete_with_noise(state, **kwargs)

    def update(self, *args, **kwargs):
        self.events.append(("update",))
        return super().update(*args, **kwargs)


def test_set_progress_follows_every_step_when_the_total_is_known():
    torch.manual_seed(0)
    dqn = ScheduledDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    result = Trainer(dqn, cartpole, eval_interval=0, seed=0, progress=False).run(steps=50)
    progress = [e[1] for e in dqn.events if e[0] == "progress"]
    assert progress == [min(1.0, k / 50) for k in range(result.steps + 1)]
    assert result.steps > 50 and progress[-1] == 1.0
    # each step: act with the current epsilon, then the progress of the step, then its update
    assert dqn.events[:7] == [
        ("progress", 0.0),
        ("act", 1.0),
        ("progress", 0.02),
        ("update",),
        ("act", pytest.approx(1 - 0.96 * 0.02 / 0.16)),
        ("progress", 0.04),
        ("update",),
    ]
    acts = [e[1] for e in dqn.events if e[0] == "act"]
    assert acts[8] == pytest.approx(0.04) and acts[-1] == pytest.approx(
        0.04
    )  # 8 steps of 50 = 16 %
    dqn.events.clear()
    Trainer(dqn, cartpole, eval_interval=0, seed=0, progress=False).run(
        2
    )  # no step limit: no progress
    assert not [e for e in dqn.events if e[0] == "progress"]


def test_set_progress_on_a_group_and_in_rollouts():
    torch.manual_seed(0)
    dqn = ScheduledDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    with cartpoles(3) as envs:
        Trainer(dqn, envs, eval_interval=0, seed=0, progress=False).run(steps=30)
    progress = [e[1] for e in dqn.events if e[0] == "progress"]
    assert progress[:4] == pytest.approx([0.0, 0.1, 0.2, 0.3]) and progress[-1] == 1.0

    seen = []

    class ProgressPPO(RolloutPPO):
        def set_progress(self, progress):
            seen.append(progress)

    torch.manual_seed(0)
    ppo = ProgressPPO(
        CategoricalActor(4, 2), ValueCritic(4), torch.optim.Adam, nn.MSELoss(), batch_size=8
    )
    Trainer(ppo, cartpole, rollout_steps=10, eval_interval=0, seed=0, progress=False).run(steps=20)
    assert seen == pytest.approx([k / 20 for k in range(21)])


# -- option errors of the schedules -----------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"updates_per_step": 1, "train_freq": 4},
            "give updates_per_step .* or train_freq / gradient_steps .*, "
            "not both: got updates_per_step=1, train_freq=4",
        ),
        ({"updates_per_step": 0.5, "gradient_steps": 2}, "not both"),
        (
            {"train_freq": 0},
            r"train_freq must be a positive integer \(environment steps\) or a pair .* got 0",
        ),
        ({"train_freq": (4, "minute")}, r"train_freq must be .* got \(4, 'minute'\)"),
        ({"train_freq": (0, "episode")}, r"got \(0, 'episode'\)"),
        (
            {"gradient_steps": 0},
            r"gradient_steps must be a positive integer or -1 \(as many as steps taken\), got 0",
        ),
        ({"gradient_steps": -2}, "got -2"),
        ({"rollout_steps": 0}, "rollout_steps must be an integer >= 1, got 0"),
        (
            {"rollout_steps": 8},
            "rollout_steps stores each rollout with store_episode: it needs store='episode', "
            "got store='transition'",
        ),
        (
            {"rollout_steps": 8, "store": "episode", "updates_per_episode": 1},
            "rollout_steps makes one update per rollout: leave out .* got rollout_steps=8 with updates_per_episode=1",
        ),
        (
            {"rollout_steps": 8, "store": "episode", "warmup_steps": 100, "train_freq": 2},
            "got rollout_steps=8 with train_freq=2, warmup_steps=100",
        ),
        (
            {"eval_interval": 5, "eval_every_steps": 100},
            "evaluate every eval_interval episodes or every eval_every_steps steps, not both: got eval_interval=5 "
            "and eval_every_steps=100",
        ),
        ({"eval_every_steps": -1}, "eval_every_steps must be an integer >= 0, got -1"),
    ],
)
def test_contradictory_or_bad_schedule_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Trainer(make_dqn(), cartpole, **kwargs)


def test_a_group_without_evaluation_environment_refuses_step_evaluations():
    with (
        cartpoles(2) as envs,
        pytest.raises(
            ValueError,
            match="give eval_env .* or eval_interval=0, got eval_interval=0 and eval_every_steps=50",
        ),
    ):
        Trainer(make_dqn(), envs, eval_every_steps=50)


@pytest.mark.learning
def test_ppo_learns_cartpole_from_fixed_length_rollouts_of_four_environments():
    torch.manual_seed(0)
    np.random.seed(0)
    ppo = PPO(
        CategoricalActor(4, 2),
        ValueCritic(4),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=128,
        actor_update_times=20,
        critic_update_times=20,
        actor_learning_rate=0.003,
        critic_learning_rate=0.005,
        gae_lambda=0.95,
    )
    start, cpu = time.time(), time.process_time()
    with cartpoles(4) as envs:
        result = Trainer(
            ppo, envs, rollout_steps=128, eval_interval=0, solved_reward=150, seed=0, progress=False
        ).run(steps=30000)
    print(
        f"PPO through the Trainer, rollouts of 128 steps on 4 environments: solved at episode "
        f"{result.solved_episode} ({result.steps} steps, {time.time() - start:.1f} s wall, "
        f"{time.process_time() - cpu:.1f} s CPU)"
    )
    assert result.solved_episode is not None
    assert result.steps % 512 == 0  # whole rollouts only
