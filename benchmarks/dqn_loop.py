"""DQN training step (act with noise + store + update) against a bare-PyTorch floor.

Both sides do the same work per environment step on CartPole-sized data: an
epsilon-greedy action from an MLP 4-16-16-2, storing the transition in a ring of
preallocated tensors, sampling 100 rows, a double-DQN target, an MSE loss (sum), an
Adam step and a soft target update. The environment itself is left out (it costs the
same on both sides); transitions come from a fixed random stream. The floor writes its
replay rows through numpy views of the preallocated tensors and gathers batches with
``ndarray.take`` (see ``benchmarks/buffers.py``); it draws with replacement, the library
draws distinct rows. ``benchmarks/loops.py`` runs whole loops on the real environment.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from machin.frame.algorithms import DQN

try:
    from .common import clock_for, compare, floor_adam, setup_torch
except ImportError:  # run as a script
    from common import clock_for, compare, floor_adam, setup_torch

BATCH, STATE, ACTIONS, CAPACITY, TAU, GAMMA = 100, 4, 2, 100_000, 0.005, 0.99


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(STATE, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, ACTIONS)
        )

    def forward(self, state):
        return self.net(state)


def stream(n=4096):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(n, 1, STATE, generator=g),
        torch.rand(n, generator=g).tolist(),
        (torch.rand(n, generator=g) < 0.05).tolist(),
    )


class Floor:
    """The same step written by hand (replay on the CPU, networks on ``device``)."""

    def __init__(self, qnet, device):
        self.q, self.q_t = qnet.to(device), copy.deepcopy(qnet).to(device)
        self.device = device
        self.opt = floor_adam(self.q.parameters(), lr=1e-3)
        self.columns = (
            torch.empty(CAPACITY, STATE),
            torch.empty(CAPACITY, 1, dtype=torch.long),
            torch.empty(CAPACITY, STATE),
            torch.empty(CAPACITY, 1),
            torch.empty(CAPACITY, 1),
        )
        self.views = tuple(
            c.numpy() for c in self.columns
        )  # rows are written and gathered through these
        self.s, self.a, self.s2 = self.views[:3]
        self.r, self.d = self.views[3][:, 0], self.views[4][:, 0]
        self.size = self.pos = 0
        self.eps = 1.0
        self.loss = nn.MSELoss(reduction="sum")

    def step(self, state, next_state, reward, done):
        with torch.no_grad():
            action = self.q(state.to(self.device)).argmax(1, keepdim=True)
            explore = torch.rand(action.shape, device=action.device) < self.eps
            action = torch.where(explore, torch.randint_like(action, ACTIONS), action)
            self.eps *= 0.9999
        p = self.pos
        self.s[p], self.a[p], self.s2[p] = state.numpy(), action.cpu().numpy(), next_state.numpy()
        self.r[p], self.d[p] = reward, done
        self.pos, self.size = (p + 1) % CAPACITY, min(self.size + 1, CAPACITY)
        idx = torch.randint(self.size, (BATCH,)).numpy()
        s, a, s2, r, d = (torch.from_numpy(v.take(idx, axis=0)).to(self.device) for v in self.views)
        with torch.no_grad():
            next_a = self.q(s2).argmax(1, keepdim=True)
            target = r + GAMMA * (1 - d) * self.q_t(s2).gather(1, next_a)
        loss = self.loss(target, self.q(s).gather(1, a))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.q_t.parameters()), list(self.q.parameters()), TAU)
        return loss.item()


def main(device: str = "cpu") -> None:
    setup_torch()
    states, rewards, dones = stream()
    qnet = QNet()
    dqn = DQN(
        copy.deepcopy(qnet).to(device),
        copy.deepcopy(qnet).to(device),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=BATCH,
        update_rate=TAU,
        discount=GAMMA,
        replay_size=CAPACITY,
    )
    floor = Floor(copy.deepcopy(qnet), device)
    counter = {"lib": 0, "floor": 0}

    def library_step():
        i = counter["lib"] = (counter["lib"] + 1) % (len(rewards) - 1)
        state = states[i]
        action = dqn.act_discrete_with_noise({"state": state})
        dqn.store_transition(
            {
                "state": {"state": state},
                "action": {"action": action},
                "next_state": {"state": states[i + 1]},
                "reward": rewards[i],
                "terminal": dones[i],
            }
        )
        return dqn.update()

    def floor_step():
        i = counter["floor"] = (counter["floor"] + 1) % (len(rewards) - 1)
        return floor.step(states[i], states[i + 1], rewards[i], dones[i])

    for _ in range(BATCH):  # fill both buffers past one batch
        library_step()
        floor_step()
    compare(
        f"DQN step (act_discrete_with_noise + store_transition + update) on {device}",
        library_step,
        floor_step,
        number=100,
        repeats=11,
        clock=clock_for(device),
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
