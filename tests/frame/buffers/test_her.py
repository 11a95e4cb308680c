"""Tests of machin.frame.buffers.her.HindsightReplay: goal choice, relabelling, errors, use with
DQN / DDPG / TD3 / SAC, and DQN learning the bit-flipping task with HER where it fails without."""

import re

import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import DDPG, DQN, SAC, TD3
from machin.frame.algorithms.run_state import RunStateError
from machin.frame.buffers import Buffer, HindsightReplay
from machin.frame.transition import Transition

GOAL_DIM = 2


def distance_reward(achieved, desired, info):
    """0 where the goals are within 0.5 of each other, else -1 (as the gymnasium-robotics tasks)."""
    return -(np.linalg.norm(achieved - desired, axis=-1) > 0.5).astype(np.float32)


def step(t, desired=9.0, reward=-1.0, terminal=False, action=None, **custom):
    """Step ``t``: observation ``t``, achieved goal ``t`` before and ``t + 1`` after the step."""
    action = torch.tensor([[t % 2]]) if action is None else action

    def state(achieved):
        return {
            "observation": torch.full((1, 3), float(t)),
            "achieved_goal": torch.full((1, GOAL_DIM), float(achieved)),
            "desired_goal": torch.full((1, GOAL_DIM), desired),
        }

    return dict(
        state=state(t),
        action={"action": action},
        next_state=state(t + 1),
        reward=reward,
        terminal=terminal,
        **custom,
    )


def episode(length=4, **kwargs):
    return [step(t, **kwargs) for t in range(length)]


def seeded(strategy, k=4, seed=3, **kwargs):
    generator = torch.Generator().manual_seed(seed)
    return HindsightReplay(distance_reward, strategy, k, generator=generator, **kwargs)


def desired(transition):
    return transition["state"]["desired_goal"][0, 0].item()


# -- which goals are chosen ---------------------------------------------------------------
def test_final_uses_the_last_achieved_goal_once_per_transition():
    her = HindsightReplay(distance_reward, "final", k=4)
    assert her.copies == 1
    assert her.goal_indices(3).tolist() == [[2], [2], [2]]
    assert HindsightReplay(distance_reward, "final", k=0).goal_indices(3).shape == (3, 0)


def test_future_draws_from_the_step_itself_to_the_end():
    index = seeded("future", k=200).goal_indices(5)
    assert index.shape == (5, 200) and index.dtype == torch.int64
    for t in range(5):  # 200 draws per row reach every step of t .. 4, and no other
        assert sorted(set(index[t].tolist())) == list(range(t, 5))
    assert torch.equal(index, seeded("future", k=200).goal_indices(5))  # same seed, same goals
    assert not torch.equal(index, seeded("future", k=200, seed=4).goal_indices(5))


def test_episode_draws_from_the_whole_episode():
    index = seeded("episode", k=200).goal_indices(5)
    for t in range(5):
        assert sorted(set(index[t].tolist())) == list(range(5))


# -- relabelling ----------------------------------------------------------------------------
def test_final_relabelling_by_hand():
    steps = episode(3)
    out = HindsightReplay(distance_reward, "final").relabel(steps)
    assert len(out) == 6 and all(a is b for a, b in zip(out, steps))  # originals first, unchanged
    copies = out[3:]
    # The last step's next_state achieved goal is 3: it is every copy's goal, in state and next_state.
    assert [desired(c) for c in copies] == [3.0, 3.0, 3.0]
    assert all(
        torch.equal(c["next_state"]["desired_goal"], torch.full((1, 2), 3.0)) for c in copies
    )
    assert [c["reward"] for c in copies] == [-1.0, -1.0, 0.0]  # achieved 1, 2, 3 against goal 3
    for t, c in enumerate(copies):
        assert torch.equal(c["state"]["observation"], steps[t]["state"]["observation"])
        assert torch.equal(c["state"]["achieved_goal"], steps[t]["state"]["achieved_goal"])
        assert c["action"] is steps[t]["action"] and c["terminal"] is False
    assert [desired(t) for t in steps] == [9.0, 9.0, 9.0]  # the episode itself was not modified


def test_future_relabelling_uses_the_drawn_goals_and_recomputes_rewards():
    steps = episode(5)
    index = seeded("future", k=2).goal_indices(5)
    out = seeded("future", k=2).relabel(steps)
    assert len(out) == 15
    for t in range(5):  # copies ordered by step, then copy; goal j means achieved goal j + 1
        for c in range(2):
            copy, j = out[5 + 2 * t + c], index[t, c].item()
            assert desired(copy) == j + 1
            assert copy["reward"] == (0.0 if j == t else -1.0)
            assert copy["state"]["observation"][0, 0].item() == t


def test_compute_reward_is_called_once_with_the_batch_and_infos():
    calls = []

    def reward(achieved, desired, info):
        calls.append((achieved.copy(), desired.copy(), info))
        return np.arange(len(achieved), dtype=np.float64).reshape(-1, 1)  # [N, 1] is accepted

    steps = [step(t, info={"t": t}) for t in range(3)]
    out = HindsightReplay(reward, "final").relabel(steps)
    assert len(calls) == 1
    achieved, goal, info = calls[0]
    assert achieved.shape == (3, GOAL_DIM) and achieved[:, 0].tolist() == [1.0, 2.0, 3.0]
    assert goal[:, 0].tolist() == [3.0, 3.0, 3.0]
    assert info.dtype == object and [i["t"] for i in info] == [0, 1, 2]
    assert [c["reward"] for c in out[3:]] == [0.0, 1.0, 2.0]
    assert [c["info"] for c in out[3:]] == [{"t": 0}, {"t": 1}, {"t": 2}]


def test_episode_strategy_and_k_zero():
    steps = episode(4)
    out = seeded("episode", k=3).relabel(steps)
    assert len(out) == 16 and {desired(c) for c in out[4:]} <= {1.0, 2.0, 3.0, 4.0}
    unchanged = seeded("future", k=0).relabel(steps)
    assert len(unchanged) == 4 and all(a is b for a, b in zip(unchanged, steps))
    assert HindsightReplay(distance_reward).relabel([]) == []


def test_terminal_choices():
    steps = episode(3)
    steps[-1]["terminal"] = True
    keep = HindsightReplay(distance_reward, "final").relabel(steps)[3:]
    assert [c["terminal"] for c in keep] == [False, False, True]
    never = HindsightReplay(distance_reward, "final", terminal="never").relabel(steps)
    assert [c["terminal"] for c in never] == [False, False, True, False, False, False]

    def reached(achieved, goal, info):
        return np.all(achieved == goal, axis=-1)

    on_goal = HindsightReplay(distance_reward, "final", terminal=reached).relabel(steps)[3:]
    assert [c["terminal"] for c in on_goal] == [False, False, True]


def test_tensor_rewards_and_transition_objects_keep_their_form():
    steps = [
        Transition(**step(t, reward=torch.tensor([[-1.0]]), terminal=torch.tensor([[0]])))
        for t in range(2)
    ]
    out = HindsightReplay(distance_reward, "final", terminal="never").relabel(steps)
    assert out[0] is steps[0] and isinstance(out[2], dict)
    assert torch.equal(out[3]["reward"], torch.tensor([[0.0]]))
    assert torch.equal(out[2]["terminal"], torch.tensor([[0]]))
    buffer = Buffer(100)
    buffer.extend(out)
    _, (reward,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["reward"])
    assert reward.view(-1).tolist() == [-1.0, -1.0, -1.0, 0.0]


def test_goal_of_another_dtype_is_converted():
    steps = episode(2)
    for s in steps:
        s["state"]["desired_goal"] = s["state"]["desired_goal"].double()
        s["next_state"]["desired_goal"] = s["next_state"]["desired_goal"].double()
    copy = HindsightReplay(distance_reward, "final").relabel(steps)[2]
    assert copy["state"]["desired_goal"].dtype == torch.float64


# -- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"strategy": "past"}, ValueError, "strategy must be one of .*got 'past'"),
        ({"k": -1}, ValueError, "k must be a non-negative integer .*got -1"),
        ({"k": 2.0}, ValueError, "k must be a non-negative integer .*got 2.0"),
        ({"k": True}, ValueError, "k must be a non-negative integer .*got True"),
        (
            {"terminal": "always"},
            ValueError,
            "terminal must be 'keep', 'never' or a callable.*'always'",
        ),
        ({"generator": 3}, TypeError, "generator must be a torch.Generator or None, got int"),
    ],
)
def test_bad_options(kwargs, error, message):
    with pytest.raises(error, match=message):
        HindsightReplay(distance_reward, **kwargs)


@pytest.mark.parametrize("length", [-1, 2.0, True])
def test_goal_indices_need_a_length(length):
    with pytest.raises(ValueError, match=f"length must be a non-negative integer, got {length!r}"):
        HindsightReplay(distance_reward).goal_indices(length)


def test_compute_reward_must_be_callable():
    with pytest.raises(TypeError, match="compute_reward must be callable.*got str"):
        HindsightReplay("reward")


def test_missing_goal_keys_and_attributes_are_named():
    steps = episode(3)
    del steps[1]["next_state"]["achieved_goal"]
    with pytest.raises(
        ValueError, match=r"episode\[1\].next_state needs a tensor under the key 'achieved_goal'"
    ):
        HindsightReplay(distance_reward).relabel(steps)
    with pytest.raises(ValueError, match=r"episode\[0\].state needs a tensor under the key 'goal'"):
        HindsightReplay(distance_reward, desired_goal="goal").relabel(episode(2))
    no_reward = episode(2)
    del no_reward[0]["reward"]
    with pytest.raises(ValueError, match=r"episode\[0\] has no attribute 'reward'"):
        HindsightReplay(distance_reward).relabel(no_reward)
    with pytest.raises(TypeError, match=r"episode\[0\] must be a Transition or a dict, got list"):
        HindsightReplay(distance_reward).relabel([[1, 2]])


def test_goal_shapes_must_agree():
    steps = episode(2)
    steps[0]["next_state"]["achieved_goal"] = torch.zeros(1, 3)
    with pytest.raises(
        ValueError, match=r"next_state\['achieved_goal'\] has shape \[1, 3\].*\[1, 2\]"
    ):
        HindsightReplay(distance_reward).relabel(steps)


@pytest.mark.parametrize("shape", [(), (6,), (3, 2), (3, 1, 1)])
def test_compute_reward_of_the_wrong_shape(shape):
    her = HindsightReplay(lambda a, d, i: np.zeros(shape), "final")
    with pytest.raises(
        ValueError,
        match=rf"compute_reward must return one value per transition, an array "
        rf"of shape \(3,\).*got shape {re.escape(str(shape))}",
    ):
        her.relabel(episode(3))


def test_terminal_callable_of_the_wrong_shape():
    her = HindsightReplay(distance_reward, "final", terminal=lambda a, d, i: [True])
    with pytest.raises(
        ValueError, match=r"terminal must return one value per transition.*got shape \(1,\)"
    ):
        her.relabel(episode(3))


def test_n_step_frameworks_are_refused():
    dqn = goal_dqn(n_step=3)
    with pytest.raises(ValueError, match="DQN has n_step=3: use n_step=1"):
        HindsightReplay(distance_reward).store_episode(dqn, episode(3))
    assert dqn.replay_buffer.size() == 0


# -- with the algorithms ------------------------------------------------------------------
class GoalQNet(nn.Module):
    """Q values over 2 actions from the observation and the desired goal."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3 + GOAL_DIM, 2)

    def forward(self, observation, desired_goal):
        return self.net(torch.cat([observation, desired_goal], dim=1))


class GoalActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3 + GOAL_DIM, 1)

    def forward(self, observation, desired_goal):
        return torch.tanh(self.net(torch.cat([observation, desired_goal], dim=1)))


class GoalGaussianActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3 + GOAL_DIM, 2)

    def forward(self, observation, desired_goal, action=None):
        mu, log_sigma = self.net(torch.cat([observation, desired_goal], dim=1)).chunk(2, dim=1)
        dist = torch.distributions.Normal(mu, log_sigma.clamp(-5, 1).exp())
        raw = dist.rsample() if action is None else torch.atanh(action.clamp(-0.999, 0.999))
        log_prob = dist.log_prob(raw) - torch.log(1 - torch.tanh(raw).pow(2) + 1e-6)
        return torch.tanh(raw), log_prob.sum(dim=1, keepdim=True)


class GoalCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3 + GOAL_DIM + 1, 1)

    def forward(self, observation, desired_goal, action):
        return self.net(torch.cat([observation, desired_goal, action], dim=1))


def goal_dqn(**kwargs):
    return DQN(GoalQNet(), GoalQNet(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kwargs)


def goal_actor_critic(cls):
    """A DDPG, TD3 or SAC agent over the goal-conditioned state."""
    if cls is SAC:
        nets = [GoalGaussianActor(), GoalCritic(), GoalCritic(), GoalCritic(), GoalCritic()]
    else:
        nets = [GoalActor(), GoalActor()] + [GoalCritic() for _ in range(4 if cls is TD3 else 2)]
    return cls(*nets, torch.optim.Adam, nn.MSELoss(), batch_size=8)


@pytest.mark.parametrize("algorithm", ["DQN", "DDPG", "TD3", "SAC"])
def test_store_and_update_with_each_algorithm(algorithm):
    torch.manual_seed(0)
    if algorithm == "DQN":
        agent, steps = goal_dqn(), episode(5)
    else:
        cls = {"DDPG": DDPG, "TD3": TD3, "SAC": SAC}[algorithm]
        agent = goal_actor_critic(cls)
        steps = [step(t, action=torch.full((1, 1), 0.1 * t)) for t in range(5)]
    her = seeded("future", k=4)
    assert her.store_episode(agent, steps) == 25
    assert agent.replay_buffer.size() == 25
    _, (state, reward) = agent.replay_buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["state", "reward"]
    )
    assert sorted(state) == ["achieved_goal", "desired_goal", "observation"]
    assert (reward == 0).sum().item() > 0  # some relabelled goals were reached, none originally
    losses = agent.update()
    losses = losses if isinstance(losses, tuple) else (losses,)
    assert all(np.isfinite(float(loss)) for loss in losses)


# -- resuming -------------------------------------------------------------------------------
def test_the_generator_is_saved_and_resumed_with_the_algorithm(tmp_path):
    def build():
        torch.manual_seed(0)
        agent, her = goal_dqn(), seeded("future", k=4)
        her.attach(agent)
        return agent, her

    def next_goals(her):
        return [desired(copy) for copy in her.relabel(episode(6))[6:]]

    agent, her = build()
    her.store_episode(agent, episode(5))  # 20 goals drawn before the save
    path = str(tmp_path / "state.pt")
    agent.save_state(path)
    expected = next_goals(her)
    assert next_goals(build()[1]) != expected  # a fresh generator draws other goals
    resumed, her_resumed = build()
    resumed.resume(path)
    assert next_goals(her_resumed) == expected
    with pytest.raises(
        RunStateError, match=r"generators \['hindsight_generator'\], this algorithm has \[\]"
    ):
        goal_dqn().resume(path)  # a resume without the attached HindsightReplay is refused


def test_store_episode_attaches_the_generator():
    agent, her = goal_dqn(), seeded("final")
    her.store_episode(agent, episode(2))
    assert agent.hindsight_generator is her.generator
    her.attach(agent)  # attaching the same generator again changes nothing
    with pytest.raises(ValueError, match="DQN.hindsight_generator already holds Generator"):
        seeded("final", seed=4).attach(agent)
    unseeded = goal_dqn()
    HindsightReplay(distance_reward, "final").store_episode(unseeded, episode(2))
    assert not hasattr(unseeded, "hindsight_generator")  # the global generator is saved anyway


# -- learning: the bit-flipping task ------------------------------------------------------
def bits_reward(achieved, desired, info):
    """0 when every bit equals the goal's, else -1 (vectorised over rows)."""
    return -(achieved != desired).any(axis=-1).astype(np.float32)


def bits_reached(achieved, desired, info):
    return (achieved == desired).all(axis=-1)


class BitFlip:
    """``n`` bits and a goal pattern, both random; an action flips one bit. Reward 0 once the bits
    equal the goal (which ends the episode), else -1; at most ``n`` steps."""

    def __init__(self, n: int, seed: int):
        self.n, self.rng = n, np.random.default_rng(seed)

    def reset(self):
        self.bits = self.rng.integers(0, 2, self.n).astype(np.float32)
        self.goal = self.rng.integers(0, 2, self.n).astype(np.float32)
        self.steps = 0
        return self.observe()

    def observe(self):
        bits = torch.from_numpy(self.bits.copy()).view(1, -1)
        return {
            "observation": bits,
            "achieved_goal": bits,
            "desired_goal": torch.from_numpy(self.goal).view(1, -1),
        }

    def step(self, action: int):
        self.bits[action] = 1.0 - self.bits[action]
        self.steps += 1
        reached = bool(bits_reached(self.bits, self.goal, None))
        return self.observe(), 0.0 if reached else -1.0, reached, self.steps >= self.n


class BitQNet(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * n, 64), nn.ReLU(), nn.Linear(64, n))

    def forward(self, observation, desired_goal):
        return self.net(torch.cat([observation, desired_goal], dim=1))


def run_episode(env, act):
    """Play one episode with ``act(state) -> int``: its transitions and whether it reached the goal."""
    state, steps, done = env.reset(), [], False
    while not done:
        action = act(state)
        next_state, reward, reached, truncated = env.step(action)
        steps.append(
            dict(
                state=state,
                action={"action": torch.tensor([[action]])},
                next_state=next_state,
                reward=reward,
                terminal=reached,
            )
        )
        state, done = next_state, reached or truncated
    return steps, reached


def bitflip_success(her_k: int, n: int = 8, episodes: int = 150, seed: int = 0) -> float:
    """Train DQN on ``n`` bits for ``episodes`` episodes (HER with ``her_k`` goals, 0: none) and
    return the greedy policy's success rate on 100 new episodes."""
    torch.manual_seed(seed)
    dqn = DQN(
        BitQNet(n),
        BitQNet(n),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=128,
        learning_rate=0.003,
        discount=0.98,
        epsilon_decay=0.999,
        epsilon_min=0.05,
        update_rate=0.05,
    )
    her = HindsightReplay(
        bits_reward,
        "future",
        her_k,
        terminal=bits_reached,
        generator=torch.Generator().manual_seed(seed),
    )
    env = BitFlip(n, seed)
    for _ in range(episodes):
        steps, _ = run_episode(env, lambda s: dqn.act_discrete_with_noise(s).item())
        her.store_episode(dqn, steps)
        for _ in steps:
            dqn.update()
    test_env = BitFlip(n, seed + 1)
    with torch.no_grad():
        return np.mean(
            [run_episode(test_env, lambda s: dqn.act_discrete(s).item())[1] for _ in range(100)]
        )


@pytest.mark.learning
def test_dqn_learns_bit_flipping_with_her_only():
    """8 bits, 150 episodes: DQN with HER solves nearly every new episode, plain DQN almost none."""
    assert bitflip_success(her_k=4) >= 0.9
    assert bitflip_success(her_k=0) <= 0.2
