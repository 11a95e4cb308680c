"""Actor-critic updates (DDPG, TD3, SAC on Pendulum sizes; PPO on a 2048-step rollout) against floors.

Each floor is the same update written by hand with bare PyTorch: the same networks
(MLP 64-64), batch size 100, losses, optimizer steps and soft target updates. The
library side calls ``update()`` on a buffer filled with the same random data. The actors'
losses run through the critics; both sides compute gradients for the actor alone there
(``backward(inputs=...)``), which a plain ``loss.backward()`` would not.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.distributions import Categorical, Normal

from machin.frame.algorithms import DDPG, PPO, SAC, TD3
from machin.frame.transition import Transition

try:
    from .common import clock_for, compare, floor_adam, setup_torch
except ImportError:  # run as a script
    from common import clock_for, compare, floor_adam, setup_torch

S, A, B, GAMMA, TAU = 3, 1, 100, 0.99, 0.005


def mlp(inputs, outputs):
    return nn.Sequential(
        nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, outputs)
    )


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, A)

    def forward(self, state):
        return torch.tanh(self.net(state)) * 2


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S + A, 1)

    def forward(self, state, action):
        return self.net(torch.cat([state, action], 1))


class GaussianActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, 2 * A)

    def forward(self, state, action=None):
        mu, log_std = self.net(state).chunk(2, dim=1)
        dist = Normal(mu, log_std.clamp(-20, 2).exp())
        raw = dist.rsample()
        act = torch.tanh(raw)
        log_prob = (dist.log_prob(raw) - torch.log(1 - act.pow(2) + 1e-6)).sum(1, keepdim=True)
        return act * 2, log_prob, dist.entropy()


def replay_data(n=20_000):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(n, S, generator=g),
        torch.rand(n, A, generator=g) * 4 - 2,
        torch.randn(n, 1, generator=g),
        torch.randn(n, S, generator=g),
        (torch.rand(n, 1, generator=g) < 0.01).float(),
    )


def store_all(buffer, rows, **kwargs):
    """``buffer.extend(rows)``; one ``append`` per row where a buffer has no ``extend`` (Machin 0.3.4's,
    in ``benchmarks/original.py``)."""
    extend = getattr(buffer, "extend", None)
    if extend is None:
        for row in rows:
            buffer.append(row, **kwargs)
    else:
        extend(rows, **kwargs)


def fill(agent, data):
    s, a, r, s2, d = data
    store_all(
        agent.replay_buffer,
        (
            Transition(
                state={"state": s[i : i + 1]},
                action={"action": a[i : i + 1]},
                next_state={"state": s2[i : i + 1]},
                reward=float(r[i]),
                terminal=bool(d[i]),
            )
            for i in range(s.shape[0])
        ),
    )


DEVICE = torch.device("cpu")


def sample(data):
    """A batch from the CPU replay data, moved to the networks' device (as the library does)."""
    idx = torch.randint(data[0].shape[0], (B,))
    return [x[idx].to(DEVICE) for x in data]


def step(loss, opt, only_stepped=False):
    """Zero, backward, step. ``only_stepped`` (the actor's loss through the critics): gradients for the
    optimizer's parameters alone, ``backward(inputs=...)``, as the library does."""
    opt.zero_grad(set_to_none=True)
    if only_stepped:
        torch.autograd.backward(loss, inputs=opt.param_groups[0]["params"])
    else:
        loss.backward()
    opt.step()


def lerp(target, source):
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), TAU)


def ddpg_floor(nets, data, twin=False, delay=1):
    actor, actor_t, critics, critics_t = nets
    a_opt = floor_adam(actor.parameters(), lr=5e-4)
    c_opts = [floor_adam(c.parameters(), lr=1e-3) for c in critics]
    mse = nn.MSELoss(reduction="sum")
    count = [0]

    def update():
        s, a, r, s2, d = sample(data)
        with torch.no_grad():
            a2 = actor_t(s2)
            if twin:
                a2 = a2 + (torch.randn_like(a2) * 0.2).clamp(-0.5, 0.5)
            q2 = torch.min(*[c(s2, a2) for c in critics_t]) if twin else critics_t[0](s2, a2)
            y = r + GAMMA * (1 - d) * q2
        for c, opt in zip(critics, c_opts):
            step(mse(y, c(s, a)), opt)
        count[0] += 1
        if count[0] % delay == 0:
            step(-critics[0](s, actor(s)).mean(), a_opt, only_stepped=True)
            for target, online in zip([actor_t, *critics_t], [actor, *critics]):
                lerp(target, online)
        else:  # the same work as the library's: every update reports Q(s, mu(s)), stepped or not
            with torch.no_grad():
                critics[0](s, actor(s)).mean()

    return update


def sac_floor(nets, data):
    actor, critics, critics_t = nets
    log_alpha = torch.zeros(1, requires_grad=True, device=DEVICE)
    opts = [floor_adam(actor.parameters(), lr=5e-4)] + [
        floor_adam(c.parameters(), lr=1e-3) for c in critics
    ]
    alpha_opt = floor_adam([log_alpha], lr=1e-3)
    mse = nn.MSELoss(reduction="sum")

    def update():
        s, a, r, s2, d = sample(data)
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            a2, lp2, _ = actor(s2)
            y = r + GAMMA * (1 - d) * (torch.min(*[c(s2, a2) for c in critics_t]) - alpha * lp2)
        for c, opt in zip(critics, opts[1:]):
            step(mse(y, c(s, a)), opt)
        act, lp, _ = actor(s)
        step(
            -(torch.min(*[c(s, act) for c in critics]) - alpha * lp).mean(),
            opts[0],
            only_stepped=True,
        )
        step(-(log_alpha * (lp.detach() - A).mean()), alpha_opt)
        for target, online in zip(critics_t, critics):
            lerp(target, online)

    return update


class PPOActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(4, 2)

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample() if action is None else action.view(-1)
        return action.view(-1, 1), dist.log_prob(action).view(-1, 1), dist.entropy().view(-1, 1)


class PPOCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(4, 1)

    def forward(self, state):
        return self.net(state)


def ppo_setup(device="cpu", store=True):
    """``(ppo, library, floor, name)``: PPO on a 2048-step rollout and its hand-written floor.

    ``library()`` stores the rollout and calls ``ppo.update()``; the networks of both
    sides live on ``device`` (the rollout itself is stored on the CPU, as a buffer would).
    With ``store=False`` the floor leaves out the storage write: it trains on the rollout
    concatenated once, beforehand.
    """
    rollout, batch, actor_times, critic_times, clip = 2048, 256, 10, 10, 0.2
    g = torch.Generator().manual_seed(1)
    states = torch.randn(rollout, 1, 4, generator=g)
    actions = torch.randint(2, (rollout, 1, 1), generator=g)
    values, gaes = (
        torch.randn(rollout, generator=g).tolist(),
        torch.randn(rollout, generator=g).tolist(),
    )
    episode = [
        Transition(
            state={"state": states[i]},
            action={"action": actions[i]},
            next_state={"state": states[i]},
            reward=1.0,
            terminal=False,
            value=values[i],
            gae=gaes[i],
        )
        for i in range(rollout)
    ]
    actor, critic = PPOActor().to(device), PPOCritic().to(device)
    ppo = PPO(
        copy.deepcopy(actor),
        copy.deepcopy(critic),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=batch,
        actor_update_times=actor_times,
        critic_update_times=critic_times,
        surrogate_loss_clip=clip,
        replay_size=rollout,
    )
    a_opt, c_opt = floor_adam(actor.parameters(), lr=1e-3), floor_adam(critic.parameters(), lr=1e-3)
    mse = nn.MSELoss(reduction="sum")
    value_t, gae_t = (
        torch.tensor(values, device=device).view(-1, 1),
        torch.tensor(gaes, device=device).view(-1, 1),
    )

    def library():
        store_all(ppo.replay_buffer, episode, required_attrs=())
        ppo.update()

    stored = (torch.cat(list(states)).to(device), torch.cat(list(actions)).to(device))

    def floor():
        if store:
            s = torch.cat([states[i] for i in range(rollout)]).to(
                device
            )  # the storage write the buffer does
            a = torch.cat([actions[i] for i in range(rollout)]).to(device)
        else:
            s, a = stored
        with torch.no_grad():
            old = actor(s, a)[1]
        for _ in range(actor_times):
            idx = torch.randperm(rollout, device=device)[:batch]
            adv = gae_t[idx]
            adv = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)
            _, lp, _ = actor(s[idx], a[idx])
            ratio = (lp - old[idx]).exp()
            step(-torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean(), a_opt)
        for _ in range(critic_times):
            idx = torch.randperm(rollout, device=device)[:batch]
            step(0.5 * mse(value_t[idx], critic(s[idx])), c_opt)

    return (
        ppo,
        library,
        floor,
        f"PPO update ({rollout}-step rollout, {actor_times}+{critic_times} steps of {batch})",
    )


def ppo_bench() -> float:
    _, library, floor, name = ppo_setup()
    return compare(name, library, floor, number=3, repeats=9, warmup=1)


def main(device: str = "cpu") -> None:
    """CPU: DDPG, TD3, SAC and PPO. Another device: SAC with its networks there."""
    global DEVICE
    setup_torch()
    DEVICE = torch.device(device)
    data = replay_data()
    mse = nn.MSELoss(reduction="sum")
    if DEVICE.type != "cpu":
        sac_bench(data, mse)
        return

    ddpg_bench(data, mse)
    td3_bench(data, mse)
    sac_bench(data, mse)
    ppo_bench()


def ddpg_bench(data, mse) -> float:
    actor, critic = Actor(), Critic()
    ddpg = DDPG(
        copy.deepcopy(actor),
        copy.deepcopy(actor),
        copy.deepcopy(critic),
        copy.deepcopy(critic),
        torch.optim.Adam,
        mse,
        batch_size=B,
        update_rate=TAU,
        replay_size=len(data[0]),
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
    return compare("DDPG update", ddpg.update, floor, number=50, repeats=11)


def td3_bench(data, mse) -> float:
    actor, critic, critic2 = Actor(), Critic(), Critic()
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
        replay_size=len(data[0]),
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
    return compare("TD3 update", td3.update, floor, number=50, repeats=11)


def sac_bench(data, mse) -> float:
    gactor, critic, critic2 = GaussianActor().to(DEVICE), Critic().to(DEVICE), Critic().to(DEVICE)
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
        replay_size=len(data[0]),
        target_entropy=-A,
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
    return compare(
        f"SAC update on {DEVICE}", sac.update, floor, number=50, repeats=11, clock=clock_for(DEVICE)
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
