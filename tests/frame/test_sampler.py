"""Tests for machin.frame.sampler.VecSampler."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from torch import nn

from machin.env.wrappers import ParallelWrapperDummy, ParallelWrapperSubProc
from machin.frame.algorithms import DDPG, DQN, PPO
from machin.frame.sampler import EpisodeInfo, VecSampler
from tests.frame.algorithms.nets import CategoricalActor, QNet, ValueCritic
from tests.multiprocess import no_children_left  # noqa: F401

pytestmark = [
    pytest.mark.usefixtures("no_children_left"),
]
MULTIPROCESS = [pytest.mark.multiprocess, pytest.mark.timeout(60)]
SEED = 100


class CountingEnv(gym.Env):
    """Observation ``[index, t, episode, reset seed or -1]``; terminal after ``index + 2`` steps.

    The reward of a step is ``t + action / 10`` (``t`` counted after the step), so every
    stored number can be predicted.
    """

    metadata = {"render_modes": []}

    def __init__(self, index, horizon=None, continuous=False):
        self.index = index
        self.horizon = index + 2 if horizon is None else horizon
        self.t = self.episode = 0
        self.seed_seen = -1
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = (
            gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if continuous else gym.spaces.Discrete(3)
        )
        self.actions = []

    def _obs(self):
        return np.array([self.index, self.t, self.episode, self.seed_seen], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        self.seed_seen = -1 if seed is None else seed
        return self._obs(), {}

    def step(self, action):
        self.actions.append(action)
        self.t += 1
        reward = self.t + float(np.sum(action)) / 10
        return self._obs(), reward, self.t >= self.horizon, False, {}


def creators(n, **kwargs):
    return [lambda i: CountingEnv(i, **kwargs)] * n


class Recorder:
    """A fake framework: the action is ``(index + t) % 3``; act returns a tuple like PPO's."""

    def __init__(self):
        self.act_rows, self.episodes, self.transitions, self.updates = [], [], [], 0

    def act(self, state):
        s = state["state"]
        self.act_rows.append(s.shape[0])
        return ((s[:, 0] + s[:, 1]) % 3).long().view(-1, 1), torch.zeros(s.shape[0])

    def store_episode(self, episode):
        self.episodes.append(episode)

    def store_transition(self, transition):
        self.transitions.append(transition)

    def update(self):
        self.updates += 1


def numbers(episode):
    """An episode as plain numbers: (state, action, next_state, reward, terminal, truncated) per step."""
    return [
        (
            t["state"]["state"].tolist(),
            t["action"]["action"].tolist(),
            t["next_state"]["state"].tolist(),
            t["reward"],
            t["terminal"],
            t["truncated"],
        )
        for t in episode
    ]


def check_episode(episode, index, seed=None):
    """Every step of one stored episode of CountingEnv ``index``."""
    assert len(episode) == index + 2
    episode_number = episode[0]["state"]["state"][0, 2].item()
    for t, step in enumerate(episode):
        state, next_state = step["state"]["state"], step["next_state"]["state"]
        assert state.shape == (1, 4) and state.dtype == torch.get_default_dtype()
        assert state[0, :3].tolist() == [index, t, episode_number]
        assert next_state[0, :3].tolist() == [index, t + 1, episode_number]
        action = (index + t) % 3
        assert step["action"]["action"].tolist() == [[action]]
        assert step["reward"] == pytest.approx(t + 1 + action / 10)
        assert step["terminal"] is (t == index + 1)
        assert step["truncated"] is False
        if t + 1 < len(episode):
            assert torch.equal(next_state, episode[t + 1]["state"]["state"])
    expected_seed = seed + index if seed is not None and episode_number == 1 else -1
    assert state[0, 3].item() == expected_seed
    return episode_number


def expected_order(horizons, steps):
    """(finishing step, env index) of every episode ending within ``steps`` vector steps."""
    return sorted((k, i) for i, h in enumerate(horizons) for k in range(h, steps + 1, h))


# -- per-environment bookkeeping --------------------------------------------------------


def test_episodes_are_stored_per_environment_in_finishing_order():
    agent = Recorder()
    with ParallelWrapperDummy(creators(3)) as envs:
        sampler = VecSampler(agent, envs, seed=SEED)
        infos = sampler.collect(steps=36)  # 12 steps of 3 environments
    assert agent.act_rows == [3] * 12  # one batched act call per step
    order = expected_order([2, 3, 4], 12)
    assert [(e[0]["state"]["state"][0, 0].item()) for e in agent.episodes] == [i for _, i in order]
    assert [info.env_index for info in infos] == [i for _, i in order]
    seen = {0: 0, 1: 0, 2: 0}
    for episode, info in zip(agent.episodes, infos):
        index = info.env_index
        assert check_episode(episode, index, SEED) == seen[index] + 1
        seen[index] += 1
        assert info == EpisodeInfo(index, sum(t["reward"] for t in episode), index + 2, True, False)
    assert seen == {0: 6, 1: 4, 2: 3}
    assert sampler.total_steps == 36 and sampler.total_episodes == 13


def test_episodes_in_progress_continue_at_the_next_collect():
    whole, pieces = Recorder(), Recorder()
    with ParallelWrapperDummy(creators(3)) as envs_a, ParallelWrapperDummy(creators(3)) as envs_b:
        VecSampler(whole, envs_a, seed=SEED).collect(steps=30)
        sampler = VecSampler(pieces, envs_b, seed=SEED)
        infos = []
        for _ in range(10):
            infos += sampler.collect(steps=2)  # one step of 3 environments per call
    assert [numbers(e) for e in pieces.episodes] == [numbers(e) for e in whole.episodes]
    assert len(infos) == len(pieces.episodes) == 10
    in_progress = sum(len(e) for e in sampler._episodes)
    assert sum(len(e) for e in pieces.episodes) + in_progress == sampler.total_steps == 30


def test_collect_episodes_stops_after_the_step_that_reaches_the_count():
    agent = Recorder()
    with ParallelWrapperDummy(creators(3)) as envs:
        sampler = VecSampler(agent, envs)
        first = sampler.collect(episodes=2)  # env 0 ends at step 2, env 1 at step 3
        second = sampler.collect(episodes=1)
    assert [(i.env_index, i.length) for i in first] == [(0, 2), (1, 3)]
    assert [(i.env_index, i.length) for i in second] == [(0, 2), (2, 4)]  # both end at step 4
    assert agent.act_rows == [3] * 4
    for episode in agent.episodes:
        check_episode(episode, episode[0]["state"]["state"][0, 0].long().item())


def test_transition_mode_stores_each_step_at_once_with_updates_and_hook():
    agent = Recorder()
    calls = []
    with ParallelWrapperDummy(creators(3)) as envs:
        sampler = VecSampler(agent, envs, store="transition")
        infos = sampler.collect(
            steps=12,
            updates_per_step=0.5,
            on_step=lambda count, done: calls.append((count, len(done), agent.updates)),
        )
    assert agent.episodes == [] and len(agent.transitions) == 12
    assert calls == [(3, 0, 1), (3, 1, 3), (3, 1, 4), (3, 2, 6)]  # 1.5, 3, 4.5, 6 updates owed
    by_env = {i: [t for t in agent.transitions if t["state"]["state"][0, 0] == i] for i in range(3)}
    check_episode(by_env[0][:2], 0)
    check_episode(by_env[0][2:], 0)
    check_episode(by_env[1][:3], 1)
    assert [i.env_index for i in infos] == [0, 1, 0, 2]


# -- environment kinds ------------------------------------------------------------------


def vector_env(n, mode, **kwargs):
    return SyncVectorEnv(
        [lambda i=i: CountingEnv(i, **kwargs) for i in range(n)], autoreset_mode=mode
    )


def dummy_episodes(steps=60):
    agent = Recorder()
    with ParallelWrapperDummy(creators(3)) as envs:
        VecSampler(agent, envs, seed=SEED).collect(steps=steps)
    return agent


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_vector_env_with_immediate_reset_matches_the_dummy_wrapper_exactly(mode):
    agent = Recorder()
    envs = vector_env(3, mode)
    VecSampler(agent, envs, seed=SEED).collect(steps=60)
    envs.close()
    reference = dummy_episodes()
    assert agent.act_rows == reference.act_rows
    assert [numbers(e) for e in agent.episodes] == [numbers(e) for e in reference.episodes]


def test_vector_env_next_step_mode_skips_the_reset_step():
    agent = Recorder()
    envs = vector_env(3, AutoresetMode.NEXT_STEP)
    sampler = VecSampler(agent, envs, seed=SEED)
    sampler.collect(steps=60)
    # A reset step does not step the environment: each one stepped once per stored transition.
    for index, env in enumerate(envs.envs):
        stored = sum(len(e) for e in agent.episodes if e[0]["state"]["state"][0, 0] == index)
        assert len(env.actions) == stored + len(sampler._episodes[index])
    envs.close()
    assert agent.act_rows[:3] == [3, 3, 2]  # env 0 ended at step 2 and resets at step 3
    assert sum(agent.act_rows) == sampler.total_steps and 60 <= sampler.total_steps < 63
    reference = dummy_episodes(steps=90)  # more steps: the reset steps do not count in ours
    for index in range(3):
        ours = [numbers(e) for e in agent.episodes if e[0]["state"]["state"][0, 0] == index]
        theirs = [numbers(e) for e in reference.episodes if e[0]["state"]["state"][0, 0] == index]
        assert len(ours) >= 3 and ours == theirs[: len(ours)]
    for episode in agent.episodes:
        check_episode(episode, int(episode[0]["state"]["state"][0, 0]), SEED)


def test_vector_env_next_step_mode_when_every_environment_resets_at_once():
    agent = Recorder()
    envs = SyncVectorEnv([lambda: CountingEnv(0, horizon=2)] * 2)
    counts = []
    infos = VecSampler(agent, envs).collect(steps=8, on_step=lambda count, _: counts.append(count))
    envs.close()
    assert counts == [2, 2, 0, 2, 2]  # at step 3 both environments reset
    assert agent.act_rows == [2, 2, 2, 2]  # and no act call is made
    assert [len(e) for e in agent.episodes] == [2] * 4 and len(infos) == 4


@pytest.mark.parametrize(
    "kind", ["dummy", pytest.param("subproc", marks=MULTIPROCESS), "same_step", "next_step"]
)
def test_every_environment_kind_stores_the_same_counting_episodes(kind):
    agent = Recorder()
    if kind in ("dummy", "subproc"):
        wrapper = ParallelWrapperDummy if kind == "dummy" else ParallelWrapperSubProc
        envs = wrapper(creators(3))
    else:
        envs = vector_env(
            3, AutoresetMode.SAME_STEP if kind == "same_step" else AutoresetMode.NEXT_STEP
        )
    try:
        VecSampler(agent, envs, seed=SEED).collect(episodes=12)
    finally:
        envs.close()
    first_two = {
        i: [numbers(e) for e in agent.episodes if e[0]["state"]["state"][0, 0] == i][:2]
        for i in range(3)
    }
    reference = dummy_episodes()
    for index in range(3):
        expected = [
            numbers(e) for e in reference.episodes if e[0]["state"]["state"][0, 0] == index
        ][:2]
        assert first_two[index] == expected


def cartpole_dqn_episodes(kind):
    torch.manual_seed(0)
    qnet = QNet(hidden=16)
    dqn = DQN(qnet, qnet, torch.optim.Adam, nn.MSELoss(), mode="vanilla", epsilon_decay=0.99)
    stored = []
    dqn.store_episode = stored.append
    make = [lambda i=0: gym.make("CartPole-v1")] * 3
    if kind == "dummy":
        envs = ParallelWrapperDummy(make)
    elif kind == "subproc":
        envs = ParallelWrapperSubProc(make)
    else:
        envs = SyncVectorEnv(make, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        VecSampler(dqn, envs, act_method="act_discrete_with_noise", seed=SEED).collect(episodes=6)
    finally:
        envs.close()
    return [numbers(e) for e in stored]


@pytest.mark.parametrize("kind", [pytest.param("subproc", marks=MULTIPROCESS), "sync_vector_env"])
def test_cartpole_with_epsilon_greedy_dqn_gives_the_same_data_in_every_environment_kind(kind):
    reference = cartpole_dqn_episodes("dummy")
    assert len(reference) >= 6
    assert cartpole_dqn_episodes(kind) == reference


# -- truncation -------------------------------------------------------------------------


def test_time_limit_truncation_is_stored_as_not_terminal():
    # env 0 reaches its terminal state exactly at the limit; env 1 is cut by the limit
    make = [
        lambda i: gym.wrappers.TimeLimit(
            CountingEnv(i, horizon=3 if i == 0 else 100), max_episode_steps=3
        )
    ] * 2
    for store in ("episode", "transition"):
        agent = Recorder()
        with ParallelWrapperDummy(make) as envs:
            infos = VecSampler(agent, envs, store=store).collect(episodes=4)
        steps = [t for e in agent.episodes for t in e] if store == "episode" else agent.transitions
        assert len(steps) == 12
        ends = [
            (t["state"]["state"][0, 0].item(), t["terminal"], t["truncated"])
            for t in steps
            if t["next_state"]["state"][0, 1] == 3
        ]
        assert ends == [(0.0, True, False), (1.0, False, True)] * 2
        assert all(
            not t["terminal"] and not t["truncated"]
            for t in steps
            if t["next_state"]["state"][0, 1] < 3
        )
        assert [(i.env_index, i.length, i.terminated, i.truncated) for i in infos] == [
            (0, 3, True, False),
            (1, 3, False, True),
        ] * 2


def test_vector_env_truncation_is_stored_as_not_terminal():
    agent = Recorder()
    envs = SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(CountingEnv(1, horizon=100), max_episode_steps=4)] * 2
    )
    infos = VecSampler(agent, envs).collect(episodes=2)
    envs.close()
    assert [(i.length, i.terminated, i.truncated) for i in infos] == [(4, False, True)] * 2
    assert [[(t["terminal"], t["truncated"]) for t in e] for e in agent.episodes] == [
        [(False, False)] * 3 + [(False, True)]
    ] * 2


# -- algorithms end to end --------------------------------------------------------------


def test_dqn_in_transition_mode_with_updates():
    torch.manual_seed(0)
    qnet, target = QNet(hidden=16), QNet(hidden=16)
    dqn = DQN(qnet, target, torch.optim.Adam, nn.MSELoss(), batch_size=8, replay_size=1000)
    before = [p.clone() for p in qnet.parameters()]
    losses = []
    update = dqn.update
    dqn.update = lambda: losses.append(update())
    with ParallelWrapperDummy([lambda i: gym.make("CartPole-v1")] * 4) as envs:
        sampler = VecSampler(
            dqn, envs, act_method="act_discrete_with_noise", store="transition", seed=0
        )
        sampler.collect(steps=40, updates_per_step=0.25)
    assert dqn.replay_buffer.size() == sampler.total_steps == 40
    assert len(losses) == 10 and all(isinstance(loss, float) for loss in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, qnet.parameters()))
    batch = dqn.replay_buffer.sample_batch(
        40,
        sample_method="all",
        sample_attrs=["action", "truncated"],
        additional_concat_attrs=["truncated"],
    )[1]
    assert batch[0]["action"].shape == (40, 1) and batch[0]["action"].dtype == torch.long
    assert batch[1].shape == (40, 1)


def test_ppo_in_episode_mode():
    torch.manual_seed(0)
    ppo = PPO(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=32,
        actor_update_times=2,
        critic_update_times=2,
    )
    envs = SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=10)] * 4)
    sampler = VecSampler(ppo, envs, seed=0)  # PPO.act returns (action, log_prob, entropy)
    infos = sampler.collect(episodes=4)
    envs.close()
    assert len(infos) >= 4
    assert ppo.replay_buffer.size() == sum(i.length for i in infos)
    _, (value, gae) = ppo.replay_buffer.sample_batch(
        0,
        sample_method="all",
        sample_attrs=["value", "gae"],
        additional_concat_attrs=["value", "gae"],
    )
    assert value.shape == (ppo.replay_buffer.size(), 1) and torch.isfinite(gae).all()
    policy_value, value_loss = ppo.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float)
    assert ppo.replay_buffer.size() == 0


def test_ddpg_act_with_noise_sends_float_arrays_of_the_action_shape():
    torch.manual_seed(0)

    class Actor(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def forward(self, state):
            return torch.tanh(self.net(state))

    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(6, 1)

        def forward(self, state, action):
            return self.net(torch.cat([state, action], 1))

    ddpg = DDPG(Actor(), Actor(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss())
    with ParallelWrapperDummy(creators(2, continuous=True, horizon=3)) as envs:
        sampler = VecSampler(
            ddpg,
            envs,
            act_method="act_with_noise",
            store="transition",
            act_kwargs={"noise_param": (0.0, 0.1), "mode": "normal"},
        )
        sampler.collect(steps=6)
        sent = envs._envs[0].actions
    assert len(sent) == 3 and all(a.shape == (2,) and a.dtype == np.float32 for a in sent)
    _, (state, action) = ddpg.replay_buffer.sample_batch(
        6, sample_method="all", sample_attrs=["state", "action"]
    )
    assert action["action"].shape == (6, 2) and state["state"].shape == (6, 4)


def test_action_fn_separates_the_sent_and_the_stored_action():
    agent = Recorder()

    def action_fn(output):
        action, _ = output
        return action, {"action": action, "one_hot": nn.functional.one_hot(action.view(-1), 3)}

    with ParallelWrapperDummy(creators(2)) as envs:
        VecSampler(agent, envs, action_fn=action_fn, state_dtype=torch.float64).collect(episodes=1)
    step = agent.episodes[0][1]
    assert step["state"]["state"].dtype == torch.float64
    assert step["action"]["action"].tolist() == [[1]] and step["action"]["one_hot"].tolist() == [
        [0, 1, 0]
    ]


def test_custom_fn_adds_one_number_per_step():
    agent = Recorder()
    with ParallelWrapperDummy(creators(2)) as envs:
        sampler = VecSampler(
            agent,
            envs,
            store="transition",
            custom_fn=lambda output: {"action_log_prob": output[1] - 0.5},
        )
        sampler.collect(steps=4)
    assert [t["action_log_prob"] for t in agent.transitions] == [-0.5] * 4
    assert all(type(t["action_log_prob"]) is float for t in agent.transitions)


# -- errors -------------------------------------------------------------------------------


@pytest.fixture
def dummy_envs():
    envs = ParallelWrapperDummy(creators(3))
    yield envs
    envs.close()


def test_construction_errors(dummy_envs):
    agent = Recorder()
    with pytest.raises(
        TypeError,
        match="envs must be a ParallelWrapperDummy, a ParallelWrapperSubProc or a "
        "gymnasium VectorEnv, got CountingEnv",
    ):
        VecSampler(agent, CountingEnv(0))
    with pytest.raises(
        ValueError,
        match=r"act_method 'act_greedy' is not a method of Recorder; "
        r"its act methods are \['act'\]",
    ):
        VecSampler(agent, dummy_envs, act_method="act_greedy")
    with pytest.raises(TypeError, match="act_method must be a str, got 3"):
        VecSampler(agent, dummy_envs, act_method=3)
    with pytest.raises(
        ValueError, match=r"store must be one of \('episode', 'transition'\), got 'batch'"
    ):
        VecSampler(agent, dummy_envs, store="batch")

    class ActOnly:
        def act(self, state):
            return state["state"][:, :1]

    with pytest.raises(
        ValueError, match='store="episode" needs framework.store_episode, which ActOnly does not'
    ):
        VecSampler(ActOnly(), dummy_envs)
    with pytest.raises(TypeError, match="seed must be an int or None, got 1.5 of type float"):
        VecSampler(agent, dummy_envs, seed=1.5)
    with pytest.raises(TypeError, match="act_kwargs must be a dict or None, got list"):
        VecSampler(agent, dummy_envs, act_kwargs=[1])
    with pytest.raises(TypeError, match="state_key must be a str, got 0 of type int"):
        VecSampler(agent, dummy_envs, state_key=0)
    with pytest.raises(TypeError, match="state_dtype must be a torch.dtype or None, got 'float'"):
        VecSampler(agent, dummy_envs, state_dtype="float")


def test_non_array_spaces_are_refused():
    class DictEnv(CountingEnv):
        def __init__(self, index):
            super().__init__(index)
            self.observation_space = gym.spaces.Dict({"a": self.observation_space})

    with (
        ParallelWrapperDummy([DictEnv] * 2) as envs,
        pytest.raises(TypeError, match="needs an array observation space .* got Dict"),
    ):
        VecSampler(Recorder(), envs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "collect needs steps or episodes"),
        ({"steps": -1}, "steps must be a positive integer or None, got -1"),
        ({"steps": 0}, "steps must be a positive integer or None, got 0"),
        ({"episodes": 2.5}, "episodes must be a positive integer or None, got 2.5"),
        ({"steps": True}, "steps must be a positive integer or None, got True"),
        (
            {"steps": 3, "updates_per_step": -1},
            "updates_per_step must be a non-negative number, got -1",
        ),
    ],
)
def test_collect_argument_errors(dummy_envs, kwargs, message):
    sampler = VecSampler(Recorder(), dummy_envs)
    with pytest.raises(ValueError, match=message):
        sampler.collect(**kwargs)
    assert sampler.total_steps == 0


def test_updates_need_an_update_method(dummy_envs):
    class NoUpdate:
        def act(self, state):
            return torch.zeros(state["state"].shape[0], 1, dtype=torch.long)

        def store_episode(self, episode):
            pass

    with pytest.raises(
        ValueError, match="updates_per_step=1 needs framework.update, which NoUpdate does not"
    ):
        VecSampler(NoUpdate(), dummy_envs).collect(steps=3, updates_per_step=1)


def test_custom_fn_must_give_one_number_per_environment(dummy_envs):
    sampler = VecSampler(
        Recorder(), dummy_envs, custom_fn=lambda output: {"log_prob": torch.zeros(3, 2)}
    )
    with pytest.raises(
        ValueError,
        match=r"custom_fn must give one number per acting environment for "
        r"'log_prob': expected shape \[3\] or \[3, 1\], got \[3, 2\]",
    ):
        sampler.collect(steps=3)
    with pytest.raises(TypeError, match="custom_fn must be callable or None, got 1"):
        VecSampler(Recorder(), dummy_envs, custom_fn=1)


@pytest.mark.parametrize(
    "output, message",
    [
        (
            torch.zeros(2, 1, dtype=torch.long),
            r"Bad.act must return a tensor with one row per acting environment "
            r"for 'action': expected 3 rows, got \[2, 1\]",
        ),
        ([0, 1, 2], "expected 3 rows, got list"),
        (torch.tensor(1), r"expected 3 rows, got \[\]"),
        (
            torch.zeros(3, 2, dtype=torch.long),
            r"returned actions of shape \[3, 2\], which cannot be split into 3 "
            r"actions of shape \(\) for Discrete\(3\)",
        ),
    ],
)
def test_act_output_that_does_not_fit_the_environments(dummy_envs, output, message):
    class Bad(Recorder):
        def act(self, state):
            return output

    with pytest.raises(ValueError, match=message):
        VecSampler(Bad(), dummy_envs).collect(steps=3)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED])
def test_async_vector_env_stores_the_same_counting_episodes(mode):
    agent = Recorder()
    envs = AsyncVectorEnv([lambda i=i: CountingEnv(i) for i in range(3)], autoreset_mode=mode)
    try:
        VecSampler(agent, envs, seed=SEED).collect(episodes=10)
    finally:
        envs.close()
    reference = dummy_episodes(steps=90)
    for index in range(3):
        ours = [numbers(e) for e in agent.episodes if e[0]["state"]["state"][0, 0] == index]
        theirs = [numbers(e) for e in reference.episodes if e[0]["state"]["state"][0, 0] == index]
        assert len(ours) >= 2 and ours == theirs[: len(ours)]


# -- recurrent networks: the hidden state is fed back per environment ----------------------


class RecurrentRecorder(Recorder):
    """Acts like Recorder; the new hidden state is ``[h0 + 1, env index]`` (tuple: and ``c - 1``)."""

    def __init__(self, tuple_hidden=False):
        super().__init__()
        self.tuple_hidden, self.given = tuple_hidden, []

    def act(self, state):
        action, _ = super().act(state)
        hidden, index = state["hidden"], state["state"][:, 0]
        self.given.append(hidden)
        h = hidden[0] if self.tuple_hidden else hidden
        new_h = torch.stack([h[:, 0] + 1, index], dim=1)
        return action, ((new_h, hidden[1] - 1) if self.tuple_hidden else new_h)


def check_hidden_episode(episode, tuple_hidden=False):
    """Each episode starts from the initial state; the hidden state counts its steps and names its env."""
    index = int(episode[0]["state"]["state"][0, 0])
    for t, step in enumerate(episode):
        given, new = step["state"]["hidden"], step["next_state"]["hidden"]
        if tuple_hidden:
            assert isinstance(given, tuple) and len(given) == 2
            assert given[1].tolist() == [[-t, -t]] and new[1].tolist() == [[-t - 1, -t - 1]]
            given, new = given[0], new[0]
        assert given.tolist() == [[t, index if t else 0]]
        assert new.tolist() == [[t + 1, index]]
        if t + 1 < len(episode):
            following = episode[t + 1]["state"]["hidden"]
            assert torch.equal(new, following[0] if tuple_hidden else following)


def by_episode(transitions):
    """Regroup CountingEnv steps stored one by one: env ``i``'s episodes are ``i + 2`` steps long."""
    episodes = []
    for index in sorted({int(t["state"]["state"][0, 0]) for t in transitions}):
        steps = [t for t in transitions if t["state"]["state"][0, 0] == index]
        episodes += [steps[k : k + index + 2] for k in range(0, len(steps) - index - 1, index + 2)]
    return episodes


@pytest.mark.parametrize(
    "kind, store", [("dummy", "episode"), ("dummy", "transition"), ("next_step", "episode")]
)
def test_hidden_state_is_fed_back_per_environment_and_restarts_with_each_episode(kind, store):
    agent = RecurrentRecorder()
    envs = (
        ParallelWrapperDummy(creators(3))
        if kind == "dummy"
        else vector_env(3, AutoresetMode.NEXT_STEP)
    )
    sampler = VecSampler(
        agent, envs, hidden_key="hidden", initial_hidden=torch.zeros(1, 2), store=store
    )
    sampler.collect(steps=60)
    envs.close()
    episodes = agent.episodes if store == "episode" else by_episode(agent.transitions)
    assert len(episodes) >= 10
    for episode in episodes:
        check_hidden_episode(episode)
    # every act call got exactly the rows of the environments that act
    assert [h.shape[0] for h in agent.given] == agent.act_rows
    if kind == "next_step":
        assert min(agent.act_rows) < 3


def test_tuple_hidden_states_are_kept_and_stored_part_by_part():
    agent = RecurrentRecorder(tuple_hidden=True)
    with ParallelWrapperDummy(creators(2)) as envs:
        VecSampler(
            agent, envs, hidden_key="hidden", initial_hidden=(torch.zeros(1, 2), torch.zeros(1, 2))
        ).collect(steps=20)
    assert len(agent.episodes) >= 5
    for episode in agent.episodes:
        check_hidden_episode(episode, tuple_hidden=True)


def test_hidden_fn_picks_the_hidden_state_from_another_place():
    class Agent(RecurrentRecorder):
        def act(self, state):
            action, hidden = super().act(state)
            return action, hidden, torch.zeros(action.shape[0])  # hidden state not last

    agent = Agent()
    with ParallelWrapperDummy(creators(2)) as envs:
        VecSampler(
            agent,
            envs,
            hidden_key="hidden",
            initial_hidden=torch.zeros(1, 2),
            hidden_fn=lambda output: output[1],
        ).collect(steps=12)
    for episode in agent.episodes:
        check_hidden_episode(episode)


def test_r2d1_learns_from_sequences_collected_by_the_sampler():
    from tests.frame.algorithms.test_r2d1 import GRUQNet, make

    torch.manual_seed(0)
    agent = make(lambda: GRUQNet(state_dim=4), batch_size=8, sequence_length=4, burn_in=2, n_step=2)
    envs = ParallelWrapperDummy([lambda i: gym.make("CartPole-v1")] * 3)
    sampler = VecSampler(
        agent,
        envs,
        act_method="act_discrete_with_noise",
        seed=0,
        hidden_key="hidden",
        initial_hidden=torch.zeros(1, 8),
    )
    infos = sampler.collect(episodes=6)
    envs.close()
    assert len(infos) >= 6 and agent.replay_buffer.size() > 0
    batch = agent._sample(True)
    assert batch.hidden is not None and batch.hidden.shape == (
        8,
        8,
    )  # each sequence starts from its stored state
    assert (
        batch.hidden.abs().sum(dim=1) > 0
    ).any()  # sequences from the middle of an episode carry memory
    before = [p.clone() for p in agent.qnet.parameters()]
    losses = [agent.update() for _ in range(3)]
    assert all(isinstance(loss, float) and np.isfinite(loss) for loss in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.qnet.parameters()))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden_key": "hidden"}, "hidden_key needs initial_hidden"),
        ({"hidden_key": "hidden", "initial_hidden": torch.zeros(2, 2)}, "a \\[1, ...\\] tensor"),
        ({"initial_hidden": torch.zeros(1, 2)}, "only used with hidden_key"),
        ({"hidden_fn": lambda output: output}, "only used with hidden_key"),
        ({"hidden_key": "state", "initial_hidden": torch.zeros(1, 2)}, "other than state_key"),
    ],
)
def test_recurrent_option_errors(dummy_envs, kwargs, message):
    with pytest.raises(ValueError, match=message):
        VecSampler(RecurrentRecorder(), dummy_envs, **kwargs)


@pytest.mark.parametrize(
    "output, message",
    [
        (lambda s: torch.zeros(s.shape[0], 1, dtype=torch.long), "last element of a tuple"),
        (
            lambda s: (torch.zeros(s.shape[0], 1, dtype=torch.long), torch.zeros(s.shape[0], 3)),
            "must have the shape of the given one \\[\\[3, 2\\]\\].*got \\[\\[3, 3\\]\\]",
        ),
        (
            lambda s: (torch.zeros(s.shape[0], 1, dtype=torch.long), torch.zeros(1, 2)),
            "one row per acting environment",
        ),
        (lambda s: (torch.zeros(s.shape[0], 1, dtype=torch.long), "hidden"), "got str"),
    ],
)
def test_a_bad_new_hidden_state_is_reported(dummy_envs, output, message):
    class Agent(Recorder):
        def act(self, state):
            return output(state["state"])

    sampler = VecSampler(Agent(), dummy_envs, hidden_key="hidden", initial_hidden=torch.zeros(1, 2))
    with pytest.raises(ValueError, match=message):
        sampler.collect(steps=3)


# -- fixed-length rollouts ----------------------------------------------------------------


def pieces_by_env(episodes):
    """The stored pieces of each environment, in order."""
    pieces = {}
    for episode in episodes:
        pieces.setdefault(int(episode[0]["state"]["state"][0, 0]), []).append(episode)
    return pieces


def test_rollout_stores_n_steps_per_environment_and_the_tail_as_not_terminal():
    agent = Recorder()
    calls = []
    with ParallelWrapperDummy(creators(3)) as envs:  # episodes of 2, 3 and 4 steps
        sampler = VecSampler(agent, envs, seed=SEED)
        infos = sampler.collect_rollout(
            5, on_step=lambda count, done: calls.append((count, len(done)))
        )
    assert agent.act_rows == [3] * 5 and calls == [(3, 0), (3, 1), (3, 1), (3, 2), (3, 0)]
    # finished episodes as they end (steps 2, 3, 4, 4), then each environment's tail
    assert [(e[0]["state"]["state"][0, 0].item(), len(e)) for e in agent.episodes] == [
        (0, 2),
        (1, 3),
        (0, 2),
        (2, 4),
        (0, 1),
        (1, 2),
        (2, 1),
    ]
    assert [e[-1]["terminal"] for e in agent.episodes] == [True] * 4 + [False] * 3
    assert not any(step["truncated"] for e in agent.episodes for step in e)
    assert not any(step["terminal"] for e in agent.episodes for step in e[:-1])
    for pieces in pieces_by_env(agent.episodes).values():
        assert sum(len(p) for p in pieces) == 5  # n_steps transitions from every environment
    # the tails end in the observation each environment is in: [index, t, episode, seed]
    tails = agent.episodes[4:]
    assert [t[-1]["next_state"]["state"][0, :3].tolist() for t in tails] == [
        [0, 1, 3],
        [1, 2, 2],
        [2, 1, 2],
    ]
    for index, tail in enumerate(tails):
        assert torch.equal(tail[-1]["next_state"]["state"][0], sampler._obs[index])
    assert [(i.env_index, i.length, i.terminated) for i in infos] == [
        (0, 2, True),
        (1, 3, True),
        (0, 2, True),
        (2, 4, True),
    ]
    assert sampler.total_steps == 15 and sampler._episodes == [[], [], []]


def test_the_next_rollout_continues_the_same_episodes():
    agent, whole = Recorder(), Recorder()
    with (
        ParallelWrapperDummy(creators(3)) as envs,
        ParallelWrapperDummy(creators(3)) as reference_envs,
    ):
        sampler = VecSampler(agent, envs, seed=SEED)
        first = sampler.collect_rollout(5)
        tails = agent.episodes[-3:]
        count = len(agent.episodes)
        second = sampler.collect_rollout(4)
        reference = VecSampler(whole, reference_envs, seed=SEED)
        reference.collect(steps=27)  # the same 9 vector steps in one call
    # the first piece of every environment in the second rollout starts where its tail stopped
    following = pieces_by_env(agent.episodes[count:])
    for index, tail in enumerate(tails):
        start = following[index][0][0]["state"]["state"]
        assert torch.equal(start, tail[-1]["next_state"]["state"])
        assert start[0, :3].tolist() == tail[-1]["next_state"]["state"][0, :3].tolist()
    # an episode that spans both rollouts is reported whole, once
    assert [(i.env_index, i.length) for i in second] == [(0, 2), (1, 3), (0, 2), (2, 4), (1, 3)]
    assert second[3].episode_return == pytest.approx(
        sum(t + 1 + ((2 + t) % 3) / 10 for t in range(4))
    )
    assert len(first) + len(second) == len(whole.episodes)
    # joined at the cuts, the pieces are exactly the episodes collect stores, plus the running ones
    for index, pieces in pieces_by_env(agent.episodes).items():
        joined, current = [], []
        for piece in pieces:
            current += piece
            if piece[-1]["terminal"] or piece[-1]["truncated"]:
                joined.append(current)
                current = []
        ours = [numbers(e) for e in joined] + [numbers(current)]
        theirs = [numbers(e) for e in whole.episodes if e[0]["state"]["state"][0, 0] == index]
        assert ours == theirs + [numbers(reference._episodes[index])]


def timed_counting_env(index):
    """Env 0 terminates after 2 steps, env 1 never terminates but is cut by a time limit after 3."""
    if index == 0:
        return CountingEnv(0)
    return gym.wrappers.TimeLimit(CountingEnv(1, horizon=100), max_episode_steps=3)


@pytest.mark.parametrize("kind", ["dummy", "same_step"])
def test_rollout_keeps_termination_truncation_and_the_cut_apart(kind):
    agent = Recorder()
    if kind == "dummy":
        envs = ParallelWrapperDummy([timed_counting_env] * 2)
    else:
        envs = SyncVectorEnv(
            [lambda: timed_counting_env(0), lambda: timed_counting_env(1)],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
    infos = VecSampler(agent, envs).collect_rollout(4)
    envs.close()
    flags = [
        (e[0]["state"]["state"][0, 0].item(), len(e), e[-1]["terminal"], e[-1]["truncated"])
        for e in agent.episodes
    ]
    assert flags == [
        (0, 2, True, False),  # terminated
        (1, 3, False, True),  # time limit: not terminal, truncated
        (0, 2, True, False),
        (1, 1, False, False),  # the rollout's cut: neither
    ]
    assert [(i.env_index, i.terminated, i.truncated) for i in infos] == [
        (0, True, False),
        (1, False, True),
        (0, True, False),
    ]
    # a truncated episode's last next_state is its final observation, not the reset one
    assert agent.episodes[1][-1]["next_state"]["state"][0, 1].item() == 3


def test_rollout_on_a_next_step_vector_env_loses_one_transition_per_reset():
    agent = Recorder()
    envs = SyncVectorEnv([lambda: CountingEnv(0, horizon=2)])
    sampler = VecSampler(agent, envs)
    infos = sampler.collect_rollout(5)  # steps 1, 2 (end), 3 (reset), 4, 5 (end)
    envs.close()
    assert (
        [len(e) for e in agent.episodes] == [2, 2] and len(infos) == 2 and sampler.total_steps == 4
    )


def test_rollout_argument_errors(dummy_envs):
    with pytest.raises(
        ValueError, match="collect_rollout .* needs store=\"episode\", got store='transition'"
    ):
        VecSampler(Recorder(), dummy_envs, store="transition").collect_rollout(4)
    sampler = VecSampler(Recorder(), dummy_envs)
    for bad in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match=f"n_steps must be a positive integer, got {bad!r}"):
            sampler.collect_rollout(bad)
    with pytest.raises(TypeError, match="on_step must be callable or None, got 3"):
        sampler.collect_rollout(2, on_step=3)
    assert sampler.total_steps == 0


class StoringPPO(PPO):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stored = []

    def store_episode(self, episode):
        self.stored.append(episode)
        super().store_episode(episode)


def test_ppo_learns_from_rollouts_with_bootstrapped_tails():
    torch.manual_seed(0)
    ppo = StoringPPO(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=32,
        actor_update_times=2,
        critic_update_times=2,
        discount=0.9,
        gae_lambda=1.0,
    )
    with ParallelWrapperDummy(
        [lambda i: gym.make("CartPole-v1", max_episode_steps=10)] * 4
    ) as envs:
        sampler = VecSampler(ppo, envs, seed=0)
        for _ in range(2):
            ppo.stored.clear()
            sampler.collect_rollout(16)
            assert ppo.replay_buffer.size() == 64  # 16 steps of each of 4 environments
            _, (value,) = ppo.replay_buffer.sample_batch(
                0, sample_method="all", sample_attrs=["value"], additional_concat_attrs=["value"]
            )
            ends = np.cumsum([len(e) for e in ppo.stored]) - 1
            kinds = set()
            for episode, end in zip(ppo.stored, ends):
                last = episode[-1]
                if last["terminal"]:
                    expected, kind = last["reward"], "terminated"
                else:  # truncated by the time limit or cut by the rollout: bootstrapped from V(next_state)
                    expected = last["reward"] + 0.9 * ppo.criticize(last["next_state"]).item()
                    kind = "truncated" if last["truncated"] else "cut"
                kinds.add(kind)
                assert value[end].item() == pytest.approx(expected, rel=1e-5)
            assert "cut" in kinds and "truncated" in kinds
            before = [p.clone() for p in ppo.actor.parameters()]
            policy_value, value_loss = ppo.update()
            assert isinstance(policy_value, float) and isinstance(value_loss, float)
            assert ppo.replay_buffer.size() == 0
            assert any(not torch.equal(a, b) for a, b in zip(before, ppo.actor.parameters()))
