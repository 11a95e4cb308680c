"""Compiled updates (``framework.compile()``) against the hand-written eager floor of the same update.

The library side is ``update()`` of an algorithm compiled with ``torch.compile``
(inductor; CUDA graphs on a GPU), the floor the same update written by hand in eager
PyTorch: the networks, data and sizes of ``ac_updates.py`` (DDPG, TD3, SAC, PPO) and of
``dqn_loop.py`` (the DQN network, here an update on a filled buffer without acting).
The target is a ratio of at most 0.7: the compiled library update beats the eager
floor by 30 % or more. The compile time printed is the wall time of the first updates,
until no new graph is compiled.

``python -m benchmarks.compiled`` (CPU, one thread) or ``python -m benchmarks.compiled cuda``;
``python -m benchmarks.compiled cpu cpp_wrapper`` compiles with ``options={"cpp_wrapper": True}``
(inductor's calling code in C++ as well: longer compiles, faster calls).
"""

from __future__ import annotations

import copy
import os
import time

import torch
from torch import nn

from machin.frame.algorithms import DDPG, DQN, SAC, TD3
from machin.frame.transition import Transition

try:
    from . import ac_updates
    from .ac_updates import (
        GAMMA,
        TAU,
        Actor,
        Critic,
        GaussianActor,
        ddpg_floor,
        fill,
        sac_floor,
        step,
    )
    from .common import clock_for, compare, floor_adam, setup_torch
    from .dqn_loop import ACTIONS, STATE, QNet
except ImportError:  # run as a script
    import ac_updates
    from ac_updates import (
        GAMMA,
        TAU,
        Actor,
        Critic,
        GaussianActor,
        ddpg_floor,
        fill,
        sac_floor,
        step,
    )
    from common import clock_for, compare, floor_adam, setup_torch
    from dqn_loop import ACTIONS, STATE, QNet

B = ac_updates.B
N = 20_000
#: Keyword arguments of every ``compile()`` call (``main``'s ``options``).
COMPILE: dict = {}


def dqn_data(n: int = N):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(n, STATE, generator=g),
        torch.randint(ACTIONS, (n, 1), generator=g),
        torch.randn(n, 1, generator=g),
        torch.randn(n, STATE, generator=g),
        (torch.rand(n, 1, generator=g) < 0.05).float(),
    )


def dqn_floor(qnet: nn.Module, data):
    """Double DQN on a sampled batch: target, MSE (sum), Adam step, soft target update, loss read."""
    device = ac_updates.DEVICE
    q, q_t = qnet.to(device), copy.deepcopy(qnet).to(device)
    opt = floor_adam(q.parameters(), lr=1e-3)
    mse = nn.MSELoss(reduction="sum")
    q_params, q_t_params = list(q.parameters()), list(q_t.parameters())

    def update():
        s, a, r, s2, d = ac_updates.sample(data)
        with torch.no_grad():
            next_a = q(s2).argmax(1, keepdim=True)
            y = r + GAMMA * (1 - d) * q_t(s2).gather(1, next_a)
        loss = mse(y, q(s).gather(1, a))
        step(loss, opt)
        with torch.no_grad():
            torch._foreach_lerp_(q_t_params, q_params, TAU)
        return loss.item()

    return update


def warm_up(update, max_calls: int = 60) -> float:
    """Call ``update`` until torch.compile stops compiling new graphs; return the wall seconds."""
    start, calls, quiet = time.perf_counter(), 0, 0
    while calls < max_calls and quiet < 5:
        before = graphs()
        update()
        calls += 1
        quiet = quiet + 1 if graphs() == before else 0
    return time.perf_counter() - start


def graphs() -> int:
    """Graphs torch.compile has compiled in this process (a recompilation adds one)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def gpu_busy(fn, number: int = 20) -> float:
    """Milliseconds per call that the GPU spends in kernels (the profiler's device time)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(number):
            fn()
        torch.cuda.synchronize()
    total_us = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages())
    return total_us / 1e3 / number


def row(
    name: str, framework, floor, number: int = 50, repeats: int = 11, max_calls: int = 60, **timing
) -> None:
    seconds = warm_up(framework.update, max_calls=max_calls)
    print(f"  {name}: compiled in {seconds:.1f} s", flush=True)
    before = graphs()
    compare(
        f"compiled {name} vs eager floor",
        framework.update,
        floor,
        number=number,
        repeats=repeats,
        clock=clock_for(ac_updates.DEVICE),
        **timing,
    )
    if graphs() != before:
        print(
            f"  {name}: {graphs() - before} graph(s) compiled while timing (recompilation)",
            flush=True,
        )
    if (
        ac_updates.DEVICE.type == "cuda"
    ):  # what dominates: the GPU's kernels, or the host around them
        print(
            f"  {name}: GPU busy per update: compiled {gpu_busy(framework.update):.3f} ms, "
            f"eager floor {gpu_busy(floor):.3f} ms",
            flush=True,
        )


def bench_dqn(mse) -> None:
    data = dqn_data()
    qnet = QNet().to(ac_updates.DEVICE)
    dqn = DQN(
        copy.deepcopy(qnet),
        copy.deepcopy(qnet),
        torch.optim.Adam,
        mse,
        batch_size=B,
        update_rate=TAU,
        discount=GAMMA,
        replay_size=N,
    )
    s, a, r, s2, d = data
    dqn.replay_buffer.extend(
        Transition(
            state={"state": s[i : i + 1]},
            action={"action": a[i : i + 1]},
            next_state={"state": s2[i : i + 1]},
            reward=float(r[i]),
            terminal=bool(d[i]),
        )
        for i in range(N)
    )
    row(
        "DQN update (double, MLP 4-16-16-2)",
        dqn.compile(**COMPILE),
        dqn_floor(copy.deepcopy(qnet), data),
        number=100,
    )


def bench_ddpg(data, mse) -> None:
    device = ac_updates.DEVICE
    actor, critic = Actor().to(device), Critic().to(device)
    ddpg = DDPG(
        copy.deepcopy(actor),
        copy.deepcopy(actor),
        copy.deepcopy(critic),
        copy.deepcopy(critic),
        torch.optim.Adam,
        mse,
        batch_size=B,
        update_rate=TAU,
        replay_size=N,
    )
    fill(ddpg, data)
    floor = ddpg_floor(
        (
            copy.deepcopy(actor),
            copy.deepcopy(actor),
            [copy.deepcopy(critic)],
            [copy.deepcopy(critic)],
        ),
        data,
    )
    row("DDPG update", ddpg.compile(**COMPILE), floor)


def bench_td3(data, mse) -> None:
    device = ac_updates.DEVICE
    actor, critic, critic2 = Actor().to(device), Critic().to(device), Critic().to(device)
    td3 = TD3(
        copy.deepcopy(actor),
        copy.deepcopy(actor),
        copy.deepcopy(critic),
        copy.deepcopy(critic),
        copy.deepcopy(critic2),
        copy.deepcopy(critic2),
        torch.optim.Adam,
        mse,
        batch_size=B,
        update_rate=TAU,
        replay_size=N,
    )
    fill(td3, data)
    floor = ddpg_floor(
        (
            copy.deepcopy(actor),
            copy.deepcopy(actor),
            [copy.deepcopy(critic), copy.deepcopy(critic2)],
            [copy.deepcopy(critic), copy.deepcopy(critic2)],
        ),
        data,
        twin=True,
        delay=2,
    )
    row("TD3 update", td3.compile(**COMPILE), floor)


def bench_sac(data, mse) -> None:
    device = ac_updates.DEVICE
    gactor, critic, critic2 = GaussianActor().to(device), Critic().to(device), Critic().to(device)
    sac = SAC(
        copy.deepcopy(gactor),
        copy.deepcopy(critic),
        copy.deepcopy(critic),
        copy.deepcopy(critic2),
        copy.deepcopy(critic2),
        torch.optim.Adam,
        mse,
        batch_size=B,
        update_rate=TAU,
        replay_size=N,
        target_entropy=-ac_updates.A,
    )
    fill(sac, data)
    floor = sac_floor(
        (
            copy.deepcopy(gactor),
            [copy.deepcopy(critic), copy.deepcopy(critic2)],
            [copy.deepcopy(critic), copy.deepcopy(critic2)],
        ),
        data,
    )
    row("SAC update", sac.compile(**COMPILE), floor)


def bench_ppo() -> None:
    """PPO's update on a stored 2048-step rollout (storing it is left out on both sides).

    ``ac_updates.py`` times storing the rollout plus the update, because ``update()``
    empties the buffer. Here the buffer keeps its rollout between the timed updates (its
    ``clear`` is skipped), and the floor concatenates the rollout once, outside the
    timing, so both sides time the update alone: old log-probabilities, then 10 actor
    and 10 critic steps on minibatches of 256.
    """
    ppo, library, floor, name = ac_updates.ppo_setup(ac_updates.DEVICE, store=False)
    ppo.replay_buffer.clear = lambda: None
    library()  # stores the rollout, once
    row(name, ppo.compile(**COMPILE), floor, number=3, warmup=1, max_calls=8)


def main(device: str = "cpu", *options: str) -> None:
    """Every compiled update against its eager floor, networks on ``device``.

    ``options`` are names of inductor options switched on for every compile, e.g. ``cpp_wrapper``.
    The environment variable ``MACHIN_BENCH_ROWS`` (e.g. ``td3,ddpg``) runs only those rows.
    """
    setup_torch()
    if options:
        COMPILE["options"] = dict.fromkeys(options, True)
        print(f"  compile(options={COMPILE['options']})", flush=True)
    ac_updates.DEVICE = torch.device(device)
    mse = nn.MSELoss(reduction="sum")
    data = ac_updates.replay_data(N)
    benches = {
        "dqn": lambda: bench_dqn(mse),
        "ddpg": lambda: bench_ddpg(data, mse),
        "td3": lambda: bench_td3(data, mse),
        "sac": lambda: bench_sac(data, mse),
        "ppo": bench_ppo,
    }
    for name in os.environ.get("MACHIN_BENCH_ROWS", ",".join(benches)).split(","):
        benches[name]()


if __name__ == "__main__":
    import sys

    main(*(sys.argv[1:] or ["cpu"]))
