"""A3C: gradients pushed to the servers change the shared models; pulls bring them back."""

import time

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms.a3c import A3C
from machin.frame.helpers import grad_server_helper
from machin.parallel.distributed import World
from tests.frame.algorithms.pg_nets import CategoricalActor, ValueCritic
from tests.multiprocess import no_children_left, run_ranks, wait_for  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]


def _actor():
    torch.manual_seed(0)
    return CategoricalActor(4, 2, 8)


def _critic():
    torch.manual_seed(1)
    return ValueCritic(4, 8)


def _episode(steps=6):
    generator = torch.Generator().manual_seed(3)
    states = torch.randn(steps + 1, 1, 4, generator=generator)
    return [
        {
            "state": {"state": states[i]},
            "action": {"action": torch.tensor([[i % 2]])},
            "next_state": {"state": states[i + 1]},
            "reward": 1.0,
            "terminal": i == steps - 1,
        }
        for i in range(steps)
    ]


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _a3c(servers, **kwargs):
    torch.manual_seed(5)  # local copies start away from the servers' parameters
    return A3C(CategoricalActor(4, 2, 8), ValueCritic(4, 8), nn.MSELoss(), servers, **kwargs)


def _gradient_path(rank):
    world = World(rpc_timeout=30)
    servers = grad_server_helper([_actor, _critic], learning_rate=0.05)
    a3c = _a3c(servers, update_times=1, batch_size=10)
    initial_actor, initial_critic = _flat(_actor()), _flat(_critic())

    # set_sync(False): acting does not pull; manual_sync pulls both networks
    a3c.set_sync(False)
    a3c.act({"state": torch.zeros(1, 4)})
    assert not torch.equal(_flat(a3c.actor), initial_actor)
    a3c.manual_sync()
    assert torch.equal(_flat(a3c.actor), initial_actor)
    assert torch.equal(_flat(a3c.critic), initial_critic)
    # with syncing on, act pulls the actor and criticize the critic
    a3c.set_sync(True)
    a3c.actor.net[0].weight.data.add_(1.0)
    a3c.critic.net[0].weight.data.add_(1.0)
    a3c.act({"state": torch.zeros(1, 4)})
    a3c.criticize({"state": torch.zeros(1, 4)})
    assert torch.equal(_flat(a3c.actor), initial_actor)
    assert torch.equal(_flat(a3c.critic), initial_critic)
    world.barrier()

    if rank == 0:  # one process pushes gradients
        a3c.store_episode(_episode())
        policy_value, value_loss = a3c.update()
        assert isinstance(policy_value, float) and isinstance(value_loss, float)
        assert a3c.replay_buffer.size() == 0
    world.barrier()
    # every process sees the servers' models move once the push was applied
    def changed():
        a3c.manual_sync()
        return not torch.equal(_flat(a3c.actor), initial_actor) and not torch.equal(
            _flat(a3c.critic), initial_critic
        )

    wait_for(changed, 20.0)
    result = _flat(a3c.actor).tolist()
    world.barrier()
    world.stop()
    return result


def test_pushed_gradients_reach_every_process():
    results = run_ranks(_gradient_path, 3, timeout=60)
    assert results[0] == results[1] == results[2]


def test_grad_server_must_be_a_pair():
    with pytest.raises(ValueError, match=r"grad_server must be a pair \(actor_server, critic_server\)"):
        A3C(CategoricalActor(), ValueCritic(), nn.MSELoss(), (None,))


def _learn_cartpole(rank, max_episodes, threshold):
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("control", world.get_members())
    torch.manual_seed(0)
    servers = grad_server_helper([CategoricalActor, ValueCritic], learning_rate=0.003)
    torch.manual_seed(rank)
    a3c = A3C(CategoricalActor(), ValueCritic(), nn.MSELoss(), servers, batch_size=1000, update_times=3,
              gae_lambda=0.95)
    a3c.set_sync(False)
    env = gym.make("CartPole-v0")
    smoothed, start, reached = 0.0, time.time(), None
    for episode in range(1, max_episodes + 1):
        if any(group.is_registered(f"solved_{other}") for other in range(3)):
            break
        a3c.manual_sync()
        obs, _ = env.reset(seed=rank * 10000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
        done, total, stored = False, 0.0, []
        while not done:
            action = a3c.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
            stored.append({"state": {"state": state}, "action": {"action": action},
                           "next_state": {"state": next_state}, "reward": float(reward),
                           "terminal": terminated})
            state, total, done = next_state, total + reward, terminated or truncated
        a3c.store_episode(stored)
        a3c.update()
        smoothed = 0.9 * smoothed + 0.1 * total
        if smoothed > threshold:
            reached = (episode, time.time() - start)
            group.register(f"solved_{rank}", print)
            break
    env.close()
    world.barrier()
    world.stop()
    return reached


@pytest.mark.learning
def test_a3c_learns_cartpole_with_three_processes():
    results = run_ranks(_learn_cartpole, 3, args=(400, 150.0), timeout=110)
    reached = [r for r in results if r is not None]
    for rank, result in enumerate(results):
        if result is not None:
            print(f"A3C process {rank} reached a smoothed return of 150 on CartPole-v0 at episode "
                  f"{result[0]} ({result[1]:.1f} s)")
    assert reached, "no A3C process reached a smoothed return of 150 within 400 episodes"
