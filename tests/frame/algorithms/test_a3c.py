"""A3C: gradients pushed to the servers change the shared models; pulls bring them back."""

import copy

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms.a3c import A3C
from machin.frame.helpers import grad_server_helper
from machin.parallel.distributed import World
from tests.multiprocess import no_children_left, run_ranks, wait_for  # noqa: F401

from .contract import ContractCase
from .loops import run_episodes
from .nets import CategoricalActor, ValueCritic, episode_steps, parameters, same

pytestmark = pytest.mark.usefixtures("no_children_left")


def _contract_args(ctx):
    """Local networks, and gradient servers whose models start as copies of them."""
    actor, critic = CategoricalActor(4, 2, 8), ValueCritic(4, 8)
    servers = ctx.grad_servers([lambda: copy.deepcopy(actor), lambda: copy.deepcopy(critic)])
    return actor, critic, nn.MSELoss(), servers


def _contract_act(a3c, state):
    a3c.set_sync(False)  # act with the local (loaded) actor
    return a3c.act(state)


def _contract_update(a3c, **switches):
    """Update, then pull until the servers have applied the pushed gradients (asynchronously)."""
    trained = [
        name
        for name, switch in (("actor", "update_policy"), ("critic", "update_value"))
        if switches.get(switch, True)
    ]
    before = {name: parameters(getattr(a3c, name)) for name in trained}
    result = a3c.update(**switches)
    if result is not None:
        wait_for(
            lambda: (
                a3c.manual_sync()
                or all(not same(before[n], parameters(getattr(a3c, n))) for n in trained)
            )
        )
    return result


CONTRACT_CASES = {
    A3C: ContractCase(
        args=_contract_args,
        options={"batch_size": 8, "update_times": 1},
        act=_contract_act,
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: episode_steps(12),
        update=_contract_update,
        trains={"update_value": ["critic"], "update_policy": ["actor"]},
        world=True,
    ),
}


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


@pytest.mark.multiprocess
def test_pushed_gradients_reach_every_process():
    results = run_ranks(_gradient_path, 3, timeout=60)
    assert results[0] == results[1] == results[2]


def test_grad_server_must_be_a_pair():
    with pytest.raises(
        ValueError, match=r"grad_server must be a pair \(actor_server, critic_server\)"
    ):
        A3C(CategoricalActor(), ValueCritic(), nn.MSELoss(), (None,))


class CountingServer:
    """A stand-in gradient server that keeps a copy of the gradients of every push and counts pulls."""

    def __init__(self):
        self.pushes = []
        self.pulls = 0

    def push(self, model):
        self.pushes.append([p.grad.clone() for p in model.parameters()])

    def pull(self, model):
        self.pulls += 1
        return False


class InfiniteLoss(nn.Module):
    """A value loss that is never finite: every critic step is skipped."""

    def forward(self, target, predicted):
        return (predicted - target).pow(2).sum() * float("inf")


def _counted(criterion=None, **options):
    servers = (CountingServer(), CountingServer())
    return A3C(
        CategoricalActor(4, 2, 8), ValueCritic(4, 8), criterion or nn.MSELoss(), servers, **options
    ), servers


def _push_counts(servers):
    return [len(server.pushes) for server in servers]


def test_update_pushes_each_network_once_and_keeps_its_parameters():
    torch.manual_seed(0)
    a3c, servers = _counted(update_times=7, batch_size=100)
    before = [_flat(a3c.actor), _flat(a3c.critic)]
    a3c.store_episode(_episode(12))
    policy_value, value_loss = a3c.update()  # syncing is on, yet the update pulls nothing
    assert _push_counts(servers) == [1, 1]
    assert [server.pulls for server in servers] == [0, 0]
    assert torch.equal(_flat(a3c.actor), before[0]) and torch.equal(_flat(a3c.critic), before[1])
    assert a3c.is_syncing and a3c.replay_buffer.size() == 0
    assert isinstance(policy_value, float) and value_loss > 0
    # the parameters stay fixed, so seven iterations over every sample push one iteration's gradients
    once, once_servers = _counted(update_times=1, batch_size=100)
    once.actor.load_state_dict(a3c.actor.state_dict())
    once.critic.load_state_dict(a3c.critic.state_dict())
    once.store_episode(_episode(12))
    once.update()
    for server, reference in zip(servers, once_servers):
        pushed, expected = server.pushes[0], reference.pushes[0]
        assert all(torch.allclose(a, b) for a, b in zip(pushed, expected))
        assert any(g.abs().sum() > 0 for g in pushed)


@pytest.mark.parametrize(
    ("switches", "counts"),
    [
        ({"update_policy": False}, [0, 1]),
        ({"update_value": False}, [1, 0]),
        ({"update_policy": False, "update_value": False}, [0, 0]),
    ],
)
def test_update_pushes_only_the_networks_it_trains(switches, counts):
    a3c, servers = _counted(update_times=3)
    a3c.store_episode(_episode())
    assert a3c.update(**switches) is not None
    assert _push_counts(servers) == counts


def test_update_of_an_empty_buffer_pushes_nothing():
    a3c, servers = _counted()
    assert a3c.update() is None
    assert _push_counts(servers) == [0, 0]


def test_critic_steps_skipped_for_a_non_finite_loss_push_nothing():
    a3c, servers = _counted(InfiniteLoss(), update_times=3)
    a3c.store_episode(_episode())
    with pytest.warns(RuntimeWarning, match="not finite"):
        a3c.update()
    assert _push_counts(servers) == [1, 0]
    assert a3c.skipped_updates == 1  # one critic evaluation per update, whatever update_times says


def _learn_cartpole(rank, max_episodes, threshold):
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("control", world.get_members())
    torch.manual_seed(0)
    servers = grad_server_helper([CategoricalActor, ValueCritic], learning_rate=0.003)
    torch.manual_seed(rank)
    a3c = A3C(
        CategoricalActor(),
        ValueCritic(),
        nn.MSELoss(),
        servers,
        batch_size=1000,
        update_times=1,
        gae_lambda=0.95,
    )
    a3c.set_sync(False)

    def before_episode(episode):
        if any(group.is_registered(f"solved_{other}") for other in range(3)):
            return False
        a3c.manual_sync()
        return True

    def on_episode(steps, episode):
        a3c.store_episode([step.as_dict() for step in steps])
        a3c.update()

    env = gym.make("CartPole-v0")
    result = run_episodes(
        env,
        lambda state, _: a3c.act(state)[0],
        episodes=max_episodes,
        seed=rank * 10000,
        before_episode=before_episode,
        on_episode=on_episode,
        threshold=threshold,
    )
    env.close()
    reached = None
    if result.solved_episode is not None:
        reached = (result.solved_episode, result.seconds)
        group.register(f"solved_{rank}", print)
    world.barrier()
    world.stop()
    return reached


@pytest.mark.learning
@pytest.mark.multiprocess
def test_a3c_learns_cartpole_with_three_processes(run_on):
    results = run_on(_learn_cartpole, 3, args=(400, 150.0), timeout=110)
    reached = [r for r in results if r is not None]
    for rank, result in enumerate(results):
        if result is not None:
            print(
                f"A3C process {rank} reached a smoothed return of 150 on CartPole-v0 at episode "
                f"{result[0]} ({result[1]:.1f} s)"
            )
    assert reached, "no A3C process reached a smoothed return of 150 within 400 episodes"
