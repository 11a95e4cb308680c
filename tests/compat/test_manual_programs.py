"""The manual's tutorial programs, with the calls written the way the 0.3.4 manual writes them
(only gymnasium's reset/step differ): the first program, A3C, Ape-X DQN and IMPALA.

The distributed ones run a few short episodes on three processes: the point is that every
call of the tutorials is accepted and does what it did. The A3C program also runs whole, as a
learning test: it must learn CartPole."""

import time
import warnings

import gymnasium as gym
import pytest
import torch as t
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import A3C, DQN, IMPALA, DQNApex
from machin.frame.helpers.servers import grad_server_helper, model_server_helper
from machin.parallel.distributed import World
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

observe_dim, action_num, max_steps = 4, 2, 30
A3C_MAX_EPISODES = 400  # per process: the learning test's limit


class QNet(nn.Module):
    def __init__(self, state_dim, action_num):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, 16)
        self.fc2 = nn.Linear(16, action_num)

    def forward(self, some_state):
        return self.fc2(t.relu(self.fc1(some_state)))


class Actor(nn.Module):
    """The distributed tutorial's actor."""

    def __init__(self, state_dim, action_num):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, action_num)

    def forward(self, state, action=None):
        a = t.relu(self.fc2(t.relu(self.fc1(state))))
        dist = Categorical(probs=t.softmax(self.fc3(a), dim=1))
        action = action if action is not None else dist.sample()
        return action, dist.log_prob(action.flatten()), dist.entropy()


class Critic(nn.Module):
    """The distributed tutorial's critic."""

    def __init__(self, state_dim):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 1)

    def forward(self, state):
        return self.fc3(t.relu(self.fc2(t.relu(self.fc1(state)))))


def _obs(observation):
    return t.tensor(observation, dtype=t.float32).view(1, observe_dim)


def _episode(env, act, seed, key="state", log_prob=False, max_steps=max_steps):
    """One episode as the tutorials collect it: a list of transition dicts."""
    state = _obs(env.reset(seed=seed)[0])
    steps, terminal, step = [], False, 0
    while not terminal and step <= max_steps:
        step += 1
        with t.no_grad():
            old_state = state
            result = act({key: old_state})
            action = result[0] if isinstance(result, tuple) else result
            observation, reward, terminated, truncated, _ = env.step(action.item())
            terminal = terminated or truncated
            state = _obs(observation)
        record = {
            "state": {key: old_state},
            "action": {"action": action},
            "next_state": {key: state},
            "reward": float(reward),
            "terminal": terminal or step == max_steps,
        }
        if log_prob:
            record["action_log_prob"] = result[1].item()
        steps.append(record)
    return steps


def test_first_program_runs_quietly():
    t.manual_seed(0)
    q_net, q_net_t = QNet(observe_dim, action_num), QNet(observe_dim, action_num)
    env = gym.make("CartPole-v1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a user who did nothing wrong sees no warning
        dqn = DQN(q_net, q_net_t, t.optim.Adam, nn.MSELoss(reduction="sum"))
        losses = []
        for episode in range(3):
            for transition in _episode(env, dqn.act_discrete_with_noise, episode, key="some_state"):
                dqn.store_transition(transition)
            losses.append(dqn.update())
    assert all(isinstance(loss, float) for loss in losses)
    assert dqn.replay_buffer.size() > 3


def _a3c(rank):
    t.manual_seed(rank)
    _world = World(world_size=3, rank=rank, name=str(rank), rpc_timeout=20)
    actor, critic = Actor(observe_dim, action_num), Critic(observe_dim)
    servers = grad_server_helper(
        [lambda: Actor(observe_dim, action_num), lambda: Critic(observe_dim)], learning_rate=5e-3
    )
    a3c = A3C(actor, critic, nn.MSELoss(reduction="sum"), servers)
    a3c.set_sync(False)
    env = gym.make("CartPole-v1")
    results = []
    for episode in range(2):
        a3c.manual_sync()
        a3c.store_episode(_episode(env, a3c.act, 10 * rank + episode))
        results.append(a3c.update())
    group = _world.create_rpc_group("done", ["0", "1", "2"])
    group.barrier()
    _world.stop()
    return results


def _a3c_learns(rank, max_episodes, solved_reward, solved_repeat):
    """The tutorial's A3C program on CartPole-v0's task; ``(episode, seconds)`` where this process solved it
    (``None`` if it did not).

    As in the tutorial, a process stops once its smoothed return has exceeded
    ``solved_reward`` ``solved_repeat`` times in a row; here it also tells the others,
    which stop at their next episode.
    """
    t.manual_seed(rank)
    world = World(world_size=3, rank=rank, name=str(rank), rpc_timeout=20)
    group = world.create_rpc_group("a3c_learns", ["0", "1", "2"])
    actor, critic = Actor(observe_dim, action_num), Critic(observe_dim)
    servers = grad_server_helper(
        [lambda: Actor(observe_dim, action_num), lambda: Critic(observe_dim)], learning_rate=5e-3
    )
    a3c = A3C(actor, critic, nn.MSELoss(reduction="sum"), servers)
    a3c.set_sync(False)
    env = gym.make("CartPole-v1", max_episode_steps=200)
    start, solved = time.monotonic(), None
    episode, reward_fulfilled, smoothed_total_reward = 0, 0, 0.0
    while episode < max_episodes and not any(group.is_registered(f"solved_{r}") for r in range(3)):
        episode += 1
        a3c.manual_sync()
        steps = _episode(env, a3c.act, 100000 * rank + episode, max_steps=200)
        a3c.store_episode(steps)
        a3c.update()
        smoothed_total_reward = smoothed_total_reward * 0.9 + sum(s["reward"] for s in steps) * 0.1
        reward_fulfilled = reward_fulfilled + 1 if smoothed_total_reward > solved_reward else 0
        if reward_fulfilled >= solved_repeat:
            solved = (episode, time.monotonic() - start)
            group.register(f"solved_{rank}", print)
    world.barrier()  # every process has left its loop before the world stops
    world.stop()
    return solved


def _dqn_apex(rank):
    t.manual_seed(rank)
    world = World(world_size=3, rank=rank, name=str(rank), rpc_timeout=20)
    apex_group = world.create_rpc_group("apex", ["0", "1", "2"])
    servers = model_server_helper(model_num=1)
    with pytest.warns(UserWarning, match="reduction property of criterion is not 'none'"):
        dqn_apex = DQNApex(
            QNet(observe_dim, action_num),
            QNet(observe_dim, action_num),
            t.optim.Adam,
            nn.MSELoss(reduction="sum"),
            apex_group,
            (servers[0],),
            replay_device="cpu",
            replay_size=1000,
            batch_size=16,
        )
    apex_group.barrier()
    dqn_apex.set_sync(False)
    losses = []
    if rank in (0, 1):
        env = gym.make("CartPole-v1")
        dqn_apex.manual_sync()
        for transition in _episode(env, dqn_apex.act_discrete_with_noise, rank, key="some_state"):
            dqn_apex.store_transition(transition)
    apex_group.barrier()
    if rank == 2:
        losses = [dqn_apex.update() for _ in range(3)]
    apex_group.barrier()
    size = dqn_apex.replay_buffer.all_size()
    world.stop()
    return losses, size


def _impala(rank):
    t.manual_seed(rank)
    world = World(world_size=3, rank=rank, name=str(rank), rpc_timeout=20)
    impala_group = world.create_rpc_group("impala", ["0", "1", "2"])
    servers = model_server_helper(model_num=2)  # the tutorial hands over two accessors
    impala = IMPALA(
        Actor(observe_dim, action_num),
        Critic(observe_dim),
        t.optim.Adam,
        nn.MSELoss(reduction="sum"),
        impala_group,
        servers,
        batch_size=2,
    )
    impala_group.barrier()
    impala.set_sync(False)
    result = None
    if rank in (0, 1):
        env = gym.make("CartPole-v1")
        impala.manual_sync()
        impala.store_episode(_episode(env, impala.act, rank, log_prob=True))
    impala_group.barrier()
    if rank == 2:
        result = impala.update()
    impala_group.barrier()
    world.stop()
    return result


@pytest.mark.multiprocess
@pytest.mark.usefixtures("no_children_left")
def test_a3c_tutorial_calls():
    results = run_ranks(_a3c, 3, timeout=60)
    assert all(len(r) == 2 and all(len(update) == 2 for update in r) for r in results)


@pytest.mark.learning
@pytest.mark.multiprocess
@pytest.mark.usefixtures("no_children_left")
def test_a3c_tutorial_program_learns_cartpole():
    """Three processes of the tutorial's A3C program (its learning rate, update_times=50 and one
    push per network and update) keep a smoothed return over 100 for five episodes in a row,
    the tutorial's criterion with a lower threshold (with a push per iteration it sank to about 10)."""
    results = run_ranks(_a3c_learns, 3, args=(A3C_MAX_EPISODES, 100.0, 5), timeout=85)
    solved = [(rank, r) for rank, r in enumerate(results) if r is not None]
    for rank, (episode, seconds) in solved:
        print(
            f"A3C tutorial process {rank} reached the threshold at episode {episode} ({seconds:.1f} s)"
        )
    assert solved, (
        f"no process of the A3C tutorial reached a smoothed return of 100 within {A3C_MAX_EPISODES} episodes"
    )


@pytest.mark.multiprocess
@pytest.mark.usefixtures("no_children_left")
def test_dqn_apex_tutorial_calls():
    results = run_ranks(_dqn_apex, 3, timeout=60)
    losses, size = results[2]
    assert len(losses) == 3 and all(isinstance(loss, float) for loss in losses)
    assert all(r[1] == size for r in results) and size > 2


@pytest.mark.multiprocess
@pytest.mark.usefixtures("no_children_left")
def test_impala_tutorial_calls():
    results = run_ranks(_impala, 3, timeout=60)
    assert results[0] is None and results[1] is None
    policy_value, value_loss = results[2]
    assert isinstance(policy_value, float) and isinstance(value_loss, float)
