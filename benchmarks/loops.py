"""Whole training loops on gymnasium environments: machin's DQN and DDPG against hand-written loops.

Every step of both sides of a comparison does the same work on its own copy of the
environment (same seed, same initial network weights):

1. act: DQN epsilon-greedy from an MLP 4-64-64-2 on CartPole-v1; DDPG the actor (MLP
   3-64-64-1, ``2 * tanh``) plus Gaussian noise (sigma 0.2) on Pendulum-v1;
2. step the environment (gymnasium's ``make``, with its default wrappers);
3. store the transition ``(state, action, next_state, reward, terminal)``;
4. update once on a batch of 100: double-DQN target, MSE (sum) loss, Adam, soft target
   update (tau 0.005); DDPG critic on ``r + 0.99 (1 - d) Q'(s', mu'(s'))``, actor on
   ``-Q(s, mu(s))``, two Adam steps, soft updates of both targets.

The library side is the documented loop: ``act_discrete_with_noise`` /
``act_with_noise``, ``store_transition`` of the transition dict, ``update()``. The floor is
what a careful engineer writes without a library: replay columns preallocated as tensors
and written row by row through numpy views of the same memory (``s_view[i] =
state.numpy()``), batches drawn with ``torch.randint`` and gathered with ``ndarray.take``,
and an eager PyTorch update (CleanRL style, ``torch._foreach_lerp_`` for the soft updates;
DDPG's actor loss computes gradients for the actor alone, ``backward(inputs=...)``, as the
library does: a plain ``loss.backward()`` also computes the critic's, about 50 us more per step).

Adam is torch's fused one on both sides: the library builds it so from ``torch.optim.Adam``,
and the floors use ``common.floor_adam``. For information, the eager library loops are
then timed against the same floors with torch's default (per-tensor) Adam, as hand-written
scripts such as CleanRL's use it. The floors call ``optimizer.zero_grad(set_to_none=True)``
and ``optimizer.step()`` as hand-written code does; the library calls what those methods wrap
when their profiler range and step hooks would do nothing (``machin.frame.optimizers.step``),
so for information the loops are also timed against floors that do the same (``bare``). Both
loops are then run once more with the library's update compiled (``agent.compile()``, the
documented opt-in), against the fused eager floors.

Printed per algorithm, as ``library / floor`` per step: the thread CPU time and the wall
time of the whole loop, and the thread CPU time of the store inside the loop (timed around
``store_transition`` and around the floor's five row writes of the same tensors and
numbers; both include the same clock-reading overhead). Run with ``python -m benchmarks.loops``.
"""

from __future__ import annotations

import copy
import gc
import random
import statistics
import time
from typing import Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from machin.frame.algorithms import DDPG, DQN

try:
    from .common import floor_adam, setup_torch
except ImportError:  # run as a script
    from common import floor_adam, setup_torch

BATCH, CAPACITY, TAU, GAMMA, STEPS = 100, 100_000, 0.005, 0.99, 200


def mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, outputs)
    )


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(4, 2)

    def forward(self, state):
        return self.net(state)


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(3, 1)

    def forward(self, state):
        return torch.tanh(self.net(state)) * 2


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(4, 1)

    def forward(self, state, action):
        return self.net(torch.cat([state, action], 1))


class Columns:
    """The floor's replay memory: preallocated tensors, written through numpy views."""

    def __init__(self, state_dim: int, action_dim: int, action_dtype: torch.dtype):
        self.tensors = (
            torch.zeros(CAPACITY, state_dim),
            torch.zeros(CAPACITY, action_dim, dtype=action_dtype),
            torch.zeros(CAPACITY, state_dim),
            torch.zeros(CAPACITY, 1),
            torch.zeros(CAPACITY, 1),
        )
        self.views = tuple(t.numpy() for t in self.tensors)
        self.s, self.a, self.s2 = self.views[:3]
        self.r, self.d = self.views[3][:, 0], self.views[4][:, 0]
        self.pos = self.filled = 0

    def store(
        self,
        state: torch.Tensor,
        action: torch.Tensor,
        next_state: torch.Tensor,
        reward: float,
        terminal: bool,
    ) -> None:
        i = self.pos
        self.s[i] = state.numpy()
        self.a[i] = action.numpy()
        self.s2[i] = next_state.numpy()
        self.r[i] = reward
        self.d[i] = terminal
        self.pos = i + 1 if i + 1 < CAPACITY else 0
        if self.filled < CAPACITY:
            self.filled += 1

    def sample(self):
        index = torch.randint(self.filled, (BATCH,)).numpy()
        return [torch.from_numpy(v.take(index, axis=0)) for v in self.views]


def adam_step(
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    only_stepped: bool = False,
    bare: bool = False,
) -> None:
    """Zero, backward, step; ``only_stepped`` computes gradients for the stepped parameters alone.

    ``bare`` drops the gradients and steps without the wrappers of ``zero_grad`` and ``step``
    (a profiler range, step hooks), as the library does when they would do nothing.
    """
    params = optimizer.param_groups[0]["params"]
    if bare:
        for p in params:
            p.grad = None
    else:
        optimizer.zero_grad(set_to_none=True)
    if only_stepped:  # the actor's loss runs through the critic: leave the critic's gradients out
        torch.autograd.backward(loss, inputs=params)
    else:
        loss.backward()
    if bare:
        type(optimizer).step.__wrapped__(optimizer)
    else:
        optimizer.step()


def observe(obs: np.ndarray) -> torch.Tensor:
    """An observation as a ``[1, obs]`` tensor (the same conversion on both sides)."""
    return torch.from_numpy(obs).view(1, -1)


class Side:
    """One side of a comparison: an environment, its current state, and ``run(n)``."""

    def __init__(self, env_id: str):
        self.env = gym.make(env_id)
        obs, _ = self.env.reset(seed=0)
        self.state = observe(obs)
        self.store_seconds = 0.0

    def step(self) -> None:
        raise NotImplementedError

    def run(self, steps: int) -> float:
        """Run ``steps`` loop steps; return the thread CPU seconds spent storing."""
        self.store_seconds = 0.0
        for _ in range(steps):
            self.step()
        return self.store_seconds

    def advance(self, obs: np.ndarray, done: bool) -> None:
        if done:
            obs, _ = self.env.reset()
        self.state = observe(obs)


class LibraryDQN(Side):
    def __init__(self, qnet: nn.Module, compiled: bool = False):
        super().__init__("CartPole-v1")
        self.agent = DQN(
            copy.deepcopy(qnet),
            copy.deepcopy(qnet),
            torch.optim.Adam,
            nn.MSELoss(reduction="sum"),
            batch_size=BATCH,
            update_rate=TAU,
            discount=GAMMA,
            replay_size=CAPACITY,
            learning_rate=1e-3,
        )
        if compiled:
            self.agent.compile()

    def step(self) -> None:
        state = self.state
        action = self.agent.act_discrete_with_noise({"state": state})
        obs, reward, terminated, truncated, _ = self.env.step(action.item())
        next_state = observe(obs)
        transition = {
            "state": {"state": state},
            "action": {"action": action},
            "next_state": {"state": next_state},
            "reward": float(reward),
            "terminal": terminated,
        }
        start = time.thread_time()
        self.agent.store_transition(transition)
        self.store_seconds += time.thread_time() - start
        self.agent.update()
        self.advance(obs, terminated or truncated)


class FloorDQN(Side):
    def __init__(self, qnet: nn.Module, fused: Optional[bool] = None, bare: bool = False):
        super().__init__("CartPole-v1")
        self.bare = bare
        self.q, self.q_target = copy.deepcopy(qnet), copy.deepcopy(qnet)
        self.optimizer = floor_adam(self.q.parameters(), lr=1e-3, fused=fused)
        self.params, self.target_params = (
            list(self.q.parameters()),
            list(self.q_target.parameters()),
        )
        self.mse = nn.MSELoss(reduction="sum")
        self.memory = Columns(4, 1, torch.long)
        self.epsilon = 1.0
        self.rng = random.Random(0)

    def step(self) -> None:
        state = self.state
        with torch.no_grad():
            action = self.q(state).argmax(1, keepdim=True)
        if self.rng.random() < self.epsilon:
            action.fill_(self.rng.randrange(2))
        self.epsilon *= 0.9999
        obs, reward, terminated, truncated, _ = self.env.step(action.item())
        next_state = observe(obs)
        start = time.thread_time()
        self.memory.store(state, action, next_state, float(reward), terminated)
        self.store_seconds += time.thread_time() - start
        self.update()
        self.advance(obs, terminated or truncated)

    def update(self) -> float:
        s, a, s2, r, d = self.memory.sample()
        with torch.no_grad():
            next_action = self.q(s2).argmax(1, keepdim=True)
            target = r + GAMMA * (1 - d) * self.q_target(s2).gather(1, next_action)
        loss = self.mse(self.q(s).gather(1, a), target)
        adam_step(loss, self.optimizer, bare=self.bare)
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.params, TAU)
        return loss.item()


class LibraryDDPG(Side):
    def __init__(self, actor: nn.Module, critic: nn.Module, compiled: bool = False):
        super().__init__("Pendulum-v1")
        self.agent = DDPG(
            copy.deepcopy(actor),
            copy.deepcopy(actor),
            copy.deepcopy(critic),
            copy.deepcopy(critic),
            torch.optim.Adam,
            nn.MSELoss(reduction="sum"),
            batch_size=BATCH,
            update_rate=TAU,
            discount=GAMMA,
            replay_size=CAPACITY,
            actor_learning_rate=5e-4,
            critic_learning_rate=1e-3,
        )
        if compiled:
            self.agent.compile()

    def step(self) -> None:
        state = self.state
        action = self.agent.act_with_noise({"state": state}, noise_param=(0.0, 0.2), mode="normal")
        obs, reward, terminated, truncated, _ = self.env.step(action.numpy()[0])
        next_state = observe(obs)
        transition = {
            "state": {"state": state},
            "action": {"action": action},
            "next_state": {"state": next_state},
            "reward": float(reward),
            "terminal": terminated,
        }
        start = time.thread_time()
        self.agent.store_transition(transition)
        self.store_seconds += time.thread_time() - start
        self.agent.update()
        self.advance(obs, terminated or truncated)


class FloorDDPG(Side):
    def __init__(
        self, actor: nn.Module, critic: nn.Module, fused: Optional[bool] = None, bare: bool = False
    ):
        super().__init__("Pendulum-v1")
        self.bare = bare
        self.actor, self.actor_target = copy.deepcopy(actor), copy.deepcopy(actor)
        self.critic, self.critic_target = copy.deepcopy(critic), copy.deepcopy(critic)
        self.actor_optimizer = floor_adam(self.actor.parameters(), lr=5e-4, fused=fused)
        self.critic_optimizer = floor_adam(self.critic.parameters(), lr=1e-3, fused=fused)
        self.params = list(self.actor.parameters()) + list(self.critic.parameters())
        self.target_params = list(self.actor_target.parameters()) + list(
            self.critic_target.parameters()
        )
        self.mse = nn.MSELoss(reduction="sum")
        self.memory = Columns(3, 1, torch.float32)

    def step(self) -> None:
        state = self.state
        with torch.no_grad():
            action = self.actor(state)
            action += torch.randn(action.shape) * 0.2
        obs, reward, terminated, truncated, _ = self.env.step(action.numpy()[0])
        next_state = observe(obs)
        start = time.thread_time()
        self.memory.store(state, action, next_state, float(reward), terminated)
        self.store_seconds += time.thread_time() - start
        self.update()
        self.advance(obs, terminated or truncated)

    def update(self) -> float:
        s, a, s2, r, d = self.memory.sample()
        with torch.no_grad():
            target = r + GAMMA * (1 - d) * self.critic_target(s2, self.actor_target(s2))
        loss = self.mse(self.critic(s, a), target)
        adam_step(loss, self.critic_optimizer, bare=self.bare)
        adam_step(
            -self.critic(s, self.actor(s)).mean(),
            self.actor_optimizer,
            only_stepped=True,
            bare=self.bare,
        )
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.params, TAU)
        return loss.item()


def compare_loops(
    name: str,
    library: Side,
    floor: Side,
    *,
    steps: int = STEPS,
    repeats: int = 21,
    warmup: int = 2,
    show_store: bool = True,
) -> Dict[str, float]:
    """Time both loops, alternating ``repeats`` runs of ``steps`` steps; print three lines, return the ratios.

    Each side first runs ``warmup`` untimed runs (beyond the steps that fill its replay past one
    batch). Every repeat runs both sides back to back, in an order drawn anew (seeded), and gives
    one ratio library / floor; the ratio reported is the median of those paired ratios, which a
    machine whose speed drifts between repeats disturbs far less than a ratio of two medians.
    Reported with it are the medians of the per-step thread CPU time and wall time of the whole
    loop, and (with ``show_store``) of the CPU time spent storing, in the format of
    :func:`benchmarks.common.compare`.
    """
    for side in (library, floor):
        side.run(BATCH)
    for _ in range(warmup):
        floor.run(steps)
        library.run(steps)
    times: Dict[str, Dict[str, List[float]]] = {
        "lib": {"cpu": [], "wall": [], "store": []},
        "floor": {"cpu": [], "wall": [], "store": []},
    }
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        order = [("floor", floor), ("lib", library)]
        shuffle = random.Random(0).shuffle
        for _ in range(repeats):
            shuffle(order)
            for key, side in order:
                cpu, wall = time.thread_time(), time.perf_counter()
                store = side.run(steps)
                times[key]["wall"].append((time.perf_counter() - wall) / steps)
                times[key]["cpu"].append((time.thread_time() - cpu) / steps)
                times[key]["store"].append(store / steps)
    finally:
        if gc_was_enabled:
            gc.enable()
    ratios = {}
    labels = {
        "cpu": f"{name} loop (CPU time per step)",
        "wall": f"{name} loop (wall time per step)",
        "store": f"store_transition inside the {name} loop (CPU time per step)",
    }
    if not show_store:
        del labels["store"]
    for what, label in labels.items():
        lib, flo = statistics.median(times["lib"][what]), statistics.median(times["floor"][what])
        ratios[what] = statistics.median(
            x / y for x, y in zip(times["lib"][what], times["floor"][what])
        )
        print(
            f"{label}: library {lib * 1e3:.4f} ms, floor {flo * 1e3:.4f} ms, ratio {ratios[what]:.2f} "
            f"({repeats} repeats, median of the paired ratios)",
            flush=True,
        )
    return ratios


def main() -> None:
    """Print the loop benchmarks."""
    setup_torch()
    qnet = QNet()
    compare_loops("DQN, CartPole-v1,", LibraryDQN(qnet), FloorDQN(qnet))
    actor, critic = Actor(), Critic()
    compare_loops("DDPG, Pendulum-v1,", LibraryDDPG(actor, critic), FloorDDPG(actor, critic))
    # Info: the same loops against floors with torch's default (per-tensor) Adam, as CleanRL writes them.
    compare_loops(
        "DQN against a default-Adam floor, CartPole-v1,",
        LibraryDQN(qnet),
        FloorDQN(qnet, fused=False),
        show_store=False,
    )
    compare_loops(
        "DDPG against a default-Adam floor, Pendulum-v1,",
        LibraryDDPG(actor, critic),
        FloorDDPG(actor, critic, fused=False),
        show_store=False,
    )
    # Info: against floors that also skip the idle wrappers of zero_grad and step, as the library does.
    compare_loops(
        "DQN against a floor without the optimizer wrappers, CartPole-v1,",
        LibraryDQN(qnet),
        FloorDQN(qnet, bare=True),
        show_store=False,
    )
    compare_loops(
        "DDPG against a floor without the optimizer wrappers, Pendulum-v1,",
        LibraryDDPG(actor, critic),
        FloorDDPG(actor, critic, bare=True),
        show_store=False,
    )
    # The same loops with the library's update compiled (``agent.compile()``), against the same eager floors.
    # The first updates compile (tens of seconds) during the warm-up runs.
    compare_loops(
        "DQN with compile(), CartPole-v1,",
        LibraryDQN(qnet, compiled=True),
        FloorDQN(qnet),
        show_store=False,
    )
    compare_loops(
        "DDPG with compile(), Pendulum-v1,",
        LibraryDDPG(actor, critic, compiled=True),
        FloorDDPG(actor, critic),
        show_store=False,
    )


def profile(which: str = "dqn", steps: int = 2000) -> None:
    """Print a cProfile of ``steps`` steps of the library loop (``python -m benchmarks.loops profile dqn``)."""
    import cProfile
    import pstats

    setup_torch()
    side: Callable[[], Side] = (
        (lambda: LibraryDQN(QNet())) if which == "dqn" else (lambda: LibraryDDPG(Actor(), Critic()))
    )
    loop = side()
    loop.run(BATCH + 200)
    profiler = cProfile.Profile()
    profiler.enable()
    loop.run(steps)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(40)


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "profile":
        profile(*sys.argv[2:3])
    else:
        main()
