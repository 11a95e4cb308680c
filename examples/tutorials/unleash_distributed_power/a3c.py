"""A3C on CartPole on any number of processes: ``python a3c.py [--nproc N] [--episodes E]``.

Every process is a sampler and a trainer: it plays its own episodes, computes the
A2C losses on them and pushes the gradients to two gradient servers (actor and
critic), which every process also helps to reduce. The run stops in every process
as soon as one of them has solved the environment (or has played ``--episodes``).
``python a3c.py`` starts ``--nproc`` processes (3 by default) on this machine; under
``torchrun --nproc_per_node=N a3c.py`` each process is one rank instead;
``python a3c.py --backend ray`` runs the ranks as Ray actors on this machine, and
``python a3c.py --nproc 6 --backend ray --address HOST:6379`` on a running Ray cluster
(``--address`` alone implies ``--backend ray``).

At the end the process that solved the environment (process 0 if none did) writes
its per-episode returns as a learning curve to ``--plot`` (default
``a3c_curve.png``; ``--plot ""`` writes none).
"""

import torch
from _shared import Progress, make_env, parse_args, start, write_curve
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import A3C
from machin.frame.helpers import grad_server_helper
from machin.parallel.distributed import World


class Actor(nn.Module):
    """Samples a discrete action, or scores a given one: ``(action, log_prob, entropy)``."""

    def __init__(self, state_dim=4, action_num=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    """State value ``V(s)``."""

    def __init__(self, state_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state):
        return self.net(state)


def play_episode(a3c, env, seed):
    """One episode with the current actor; returns the stored steps and the total reward."""
    obs, _ = env.reset(seed=seed)
    state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
    done, total, stored = False, 0.0, []
    while not done:
        action = a3c.act({"state": state})[0]
        obs, reward, terminated, truncated, _ = env.step(action.item())
        next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        stored.append(
            {
                "state": {"state": state},
                "action": {"action": action},
                "next_state": {"state": next_state},
                "reward": float(reward),
                "terminal": terminated,
            }
        )
        state, total, done = next_state, total + reward, terminated or truncated
    return stored, total


def main(rank, args):
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    players = world.get_members()
    group = world.create_rpc_group("a3c_control", players)
    torch.manual_seed(args.seed)
    servers = grad_server_helper([Actor, Critic], learning_rate=0.003)
    torch.manual_seed(args.seed + rank)
    # Each update() pushes one gradient per network, computed on the whole episode (batch_size
    # covers it): with the parameters fixed during an update, more update_times would only repeat it.
    a3c = A3C(
        Actor(), Critic(), nn.MSELoss(), servers, batch_size=1000, update_times=1, gae_lambda=0.95
    )
    a3c.set_sync(False)  # pull once per episode, not on every act
    env = make_env()
    progress = Progress(rank)
    for episode in range(1, args.episodes + 1):
        a3c.manual_sync()
        stored, total = play_episode(a3c, env, args.seed * 1000 + rank * 100000 + episode)
        a3c.store_episode(stored)
        a3c.update()
        if progress.record(episode, total):
            group.register(f"solved_{rank}", print)  # any registered name tells the others
        if any(
            group.is_registered(f"solved_{name}") for name in players
        ):  # solved here or elsewhere
            break
    env.close()
    world.barrier()  # every process has left its loop: the "solved" registrations are final
    writer = next((name for name in players if group.is_registered(f"solved_{name}")), players[0])
    world.barrier()  # nobody stops the world while another still asks the group
    world.stop()
    if str(rank) == writer:
        write_curve(progress.returns, args.plot, "A3C on CartPole")
    return progress.returns


def cli(description=__doc__, name="a3c"):
    """Parse the options and start the run (what ``python a3c.py`` does)."""
    start(main, parse_args(description, name, roles=False))


if __name__ == "__main__":
    cli()
