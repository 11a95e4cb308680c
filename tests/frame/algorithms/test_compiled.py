"""``framework.compile()``: compiled updates give eager's numbers, compile once, and fall back cleanly.

The equality, recompilation and fallback tests compile with the ``aot_eager`` backend:
it runs the whole machinery (tracing each step with its backward pass, functionalized
parameter updates, compiled optimizer steps) at a fraction of inductor's compile time.
One small test compiles with inductor itself.
"""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.distributions import Categorical, Normal

from machin.frame.algorithms import A2C, DDPG, DQN, PPO, SAC, TD3, DQNPer
from machin.frame.algorithms.compiled import CompileFallbackWarning
from machin.frame.transition import Transition

BACKEND = "aot_eager"
S, A = 3, 1


def mlp(inputs, outputs, hidden=8):
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs))


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, 2)

    def forward(self, state):
        return self.net(state)


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, A)

    def forward(self, state):
        return torch.tanh(self.net(state))


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
        dist = Normal(mu, log_std.clamp(-5, 1).exp())
        raw = dist.rsample()
        return torch.tanh(raw), (
            dist.log_prob(raw) - torch.log(1 - torch.tanh(raw) ** 2 + 1e-6)
        ).sum(1, keepdim=True)


class CategoricalActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, 2)

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample() if action is None else action.view(-1)
        return action.view(-1, 1), dist.log_prob(action).view(-1, 1), dist.entropy().view(-1, 1)


class ValueCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, 1)

    def forward(self, state):
        return self.net(state)


# -- building the same framework twice ---------------------------------------------------------
def dqn(mode="double", cls=DQN, **kw):
    q = QNet()
    loss = nn.MSELoss(reduction="none" if cls is DQNPer else "sum")
    return cls(q, copy.deepcopy(q), torch.optim.Adam, loss, mode=mode, batch_size=16, **kw)


def ddpg(cls=DDPG):
    actor, critic = Actor(), Critic()
    return cls(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=16,
        gradient_max=1.0,
    )


def td3():
    actor, critic, critic2 = Actor(), Critic(), Critic()
    return TD3(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        critic2,
        copy.deepcopy(critic2),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=16,
    )


def sac():
    critic, critic2 = Critic(), Critic()
    return SAC(
        GaussianActor(),
        critic,
        copy.deepcopy(critic),
        critic2,
        copy.deepcopy(critic2),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=16,
    )


def a2c(cls=A2C, **kw):
    return cls(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=16,
        actor_update_times=2,
        critic_update_times=2,
        entropy_weight=-0.01,
        **kw,
    )


def transitions(count, discrete, seed=1):
    g = torch.Generator().manual_seed(seed)
    for i in range(count):
        action = (
            torch.randint(2, (1, 1), generator=g)
            if discrete
            else torch.rand(1, A, generator=g) * 2 - 1
        )
        yield Transition(
            state={"state": torch.randn(1, S, generator=g)},
            action={"action": action},
            next_state={"state": torch.randn(1, S, generator=g)},
            reward=float(torch.randn((), generator=g)),
            terminal=i % 9 == 8,
        )


def fill(framework, count, seed=1):
    discrete = isinstance(framework, (DQN, A2C))
    episode = list(transitions(count, discrete, seed))
    if isinstance(framework, A2C):
        framework.store_episode(episode)
    else:
        framework.replay_buffer.extend(episode)


#: Rollout lengths of PPO's test: over and under the batch size of 16 (partial batches).
ROLLOUTS = (24, 10, 40, 7)


def train(framework, updates, compiled, graphs_after=None, **options):
    """Run ``updates`` updates from fixed seeds (an on-policy buffer gets a new rollout each time).

    With ``graphs_after=n``, also return how many graphs torch.compile had compiled after
    ``n`` updates and after the last.
    """
    if compiled:
        framework.compile(backend=BACKEND, **options)
    torch.manual_seed(3)
    np.random.seed(3)  # prioritized sampling draws from numpy
    results, counts = [], []
    for i in range(updates):
        if i == graphs_after:
            counts.append(graphs())
        if isinstance(framework, A2C):
            fill(
                framework, ROLLOUTS[i % len(ROLLOUTS)] if isinstance(framework, PPO) else 24, seed=i
            )
        results.append(framework.update())
    counts.append(graphs())
    return (results, counts) if graphs_after is not None else results


def graphs():
    """Graphs torch.compile has compiled in this process (each recompilation adds one)."""
    return counters["stats"]["unique_graphs"]


def twins(build):
    """Two identical frameworks (built from the same seed; deepcopy would share no buffer state)."""
    torch.manual_seed(0)
    first = build()
    torch.manual_seed(0)
    return first, build()


def networks(framework):
    return {name: getattr(framework, name) for name in framework.get_top()}


CASES = {
    "DQN-double": lambda: dqn("double"),
    "DQN-vanilla": lambda: dqn("vanilla"),
    "DQN-fixed_target": lambda: dqn("fixed_target"),
    "DQNPer": lambda: dqn("double", DQNPer),
    "DDPG": ddpg,  # HDDPG and DDPGPer run DDPG's compiled steps (their hooks are traced in them)
    "TD3": td3,
    "SAC": sac,
    "A2C": a2c,
    "PPO": lambda: a2c(PPO),
    "PPO-joint": lambda: a2c(PPO, joint_update=True, gradient_max=0.5),  # one loss, both optimizers
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_updates_equal_eager_ones_and_compile_once(name):
    eager, compiled = twins(CASES[name])
    initial = {
        key: [p.detach().clone() for p in net.parameters()] for key, net in networks(eager).items()
    }
    if not isinstance(eager, A2C):
        fill(eager, 64)
        fill(compiled, 64)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error", CompileFallbackWarning
        )  # everything compiled, nothing fell back
        expected = train(eager, 50, compiled=False)
        got, (warm, last) = train(compiled, 50, compiled=True, graphs_after=10)
    assert compiled._compiled_steps is not None and compiled._compiled_steps.disabled is None
    assert last == warm, f"{name}: {last - warm} recompilation(s) in 40 updates after the warm-up"
    # every optimizer stepped through its compiled step (a joint step's too)
    steps = compiled._compiled_steps._optimizer_steps.items()
    assert {id(o) for o in compiled._optimizers()} <= {id(o) for o, _ in steps}
    assert all(step.compiled is not None and not step.eager for _, step in steps)
    # eager steps run torch's fused Adam; compile() gave the plain step to inductor instead
    assert all(group["fused"] for o in eager._optimizers() for group in o.param_groups)
    assert not any(group["fused"] for o in compiled._optimizers() for group in o.param_groups)
    np.testing.assert_allclose(
        np.array(got, dtype=float), np.array(expected, dtype=float), rtol=1e-4, atol=1e-5
    )
    for key, network in networks(eager).items():
        for (param_name, want), have in zip(
            network.named_parameters(), networks(compiled)[key].parameters()
        ):
            assert torch.allclose(have, want, rtol=1e-4, atol=1e-5), (
                f"{name}: {key}.{param_name} differs"
            )
    # the networks learned: the comparison is not between two untouched copies
    assert any(
        not torch.equal(p, q)
        for key, net in networks(eager).items()
        for p, q in zip(net.parameters(), initial[key])
    )


@pytest.mark.parametrize(
    "name, loss_steps",
    [
        ("DQN-double", {"DQN._td_loss"}),
        ("DDPG", {"DDPG._critic_losses", "DDPG._actor_loss"}),
        ("TD3", {"TD3._critic_losses", "TD3._actor_loss"}),
        ("SAC", {"SAC._critic_losses", "SAC._actor_and_alpha_losses"}),
    ],
)
def test_the_bellman_target_is_traced_into_the_critic_step_and_target_updates_stay_eager(
    name, loss_steps
):
    # Entering compiled code costs more than a foreach soft update, and a separate call for the
    # Bellman target would cost it once more: an update enters one loss step per loss it trains.
    agent = CASES[name]()
    fill(agent, 64)
    targets = [key for key in agent.get_top() if key.endswith("_target")]
    before = {
        key: [p.detach().clone() for p in getattr(agent, key).parameters()] for key in targets
    }
    train(agent, 3, compiled=True)
    assert {step.name for step in agent._compiled_steps._steps.values()} == loss_steps
    for key in targets:  # the eager soft updates moved every target network
        assert all(
            not torch.equal(p, q) for p, q in zip(getattr(agent, key).parameters(), before[key])
        ), key


def test_no_recompilation_after_warm_up_with_partial_batches():
    torch.manual_seed(0)
    agent = dqn("double").compile(backend=BACKEND)
    stream = iter(transitions(100, discrete=True))
    for _ in range(3):  # warm-up: batches of 1, 2 and 3 samples
        agent.store_transition(next(stream))
        agent.update()
    warm = graphs()
    sizes = set()
    for _ in range(40):  # the buffer grows through the batch size: partial batches, then full ones
        agent.store_transition(next(stream))
        sizes.add(min(len(agent.replay_buffer), agent.batch_size))
        agent.update()
    assert graphs() == warm
    assert agent.batch_size in sizes and len(sizes) > 10  # partial and full batches were both seen
    assert agent._compiled_steps.disabled is None


class Untraceable(nn.Module):
    """A Q network whose forward torch.compile cannot capture as one graph."""

    def __init__(self):
        super().__init__()
        self.net = mlp(S, 2)

    def forward(self, state):
        out = self.net(state)
        torch._dynamo.graph_break()
        return out


def fallback_twins(build, updates):
    """Twins of ``build``, filled alike: one trains eagerly, the other compiled, expecting fallbacks.

    Returns ``(eager, compiled, eager losses, compiled losses, CompileFallbackWarning messages)``.
    """
    eager, compiled = twins(build)
    fill(eager, 64)
    fill(compiled, 64)
    expected = train(eager, updates, compiled=False)
    with pytest.warns(CompileFallbackWarning) as record:
        got = train(compiled, updates, compiled=True)
    messages = [str(w.message) for w in record if issubclass(w.category, CompileFallbackWarning)]
    return eager, compiled, expected, got, messages


def test_untraceable_network_falls_back_with_one_warning():
    def build():
        q = Untraceable()
        return DQN(
            q, copy.deepcopy(q), torch.optim.Adam, nn.MSELoss(reduction="sum"), batch_size=16
        )

    eager, compiled, expected, got, messages = fallback_twins(build, 20)
    assert len(messages) == 1
    assert "DQN._td_loss cannot be compiled" in messages[0] and "graph_break" in messages[0]
    assert "forward" in messages[0]  # where in the user's code tracing stopped
    assert got == pytest.approx(expected, rel=1e-5)
    for want, have in zip(eager.qnet.parameters(), compiled.qnet.parameters()):
        assert torch.allclose(have, want, atol=1e-6)


def failing_backend(graph_module, example_inputs):
    raise RuntimeError("no working C++ compiler found (simulated)")


def test_backend_failure_falls_back_to_eager_with_one_warning():
    eager, compiled = twins(ddpg)
    fill(eager, 64)
    fill(compiled, 64)
    expected = train(eager, 10, compiled=False)
    with pytest.warns(CompileFallbackWarning) as record:
        compiled.compile(backend=failing_backend)
        torch.manual_seed(3)
        np.random.seed(3)
        got = [compiled.update() for _ in range(10)]
    messages = [str(w.message) for w in record if issubclass(w.category, CompileFallbackWarning)]
    assert len(messages) == 1
    assert "DDPG._critic_losses" in messages[0] and "no working C++ compiler" in messages[0]
    assert "keeps training eagerly" in messages[0]
    assert compiled._compiled_steps.disabled is not None
    np.testing.assert_allclose(np.array(got), np.array(expected), rtol=1e-6)
    for want, have in zip(eager.actor.parameters(), compiled.actor.parameters()):
        assert torch.equal(have, want)


def test_an_optimizer_step_that_cannot_compile_steps_eagerly_with_the_fused_adam_it_was_built_with(
    monkeypatch,
):
    from machin.frame.algorithms.compiled import CompiledSteps

    real = CompiledSteps._compile

    def refuse_optimizer_steps(self, template, name, fullgraph):
        if "qnet_optim" in name:
            raise RuntimeError("simulated: this optimizer step cannot be traced")
        return real(self, template, name, fullgraph)

    monkeypatch.setattr(CompiledSteps, "_compile", refuse_optimizer_steps)
    _, compiled, expected, got, messages = fallback_twins(dqn, 10)
    assert len(messages) == 1 and "the step of DQN.qnet_optim cannot be compiled" in messages[0]
    assert [g["fused"] for g in compiled.qnet_optim.param_groups] == [True]
    assert got == pytest.approx(expected, rel=1e-5)


def test_an_adam_fused_at_the_users_request_stays_fused_and_steps_eagerly():
    import functools

    q = QNet()
    agent = DQN(
        q,
        copy.deepcopy(q),
        functools.partial(torch.optim.Adam, fused=True),
        nn.MSELoss(reduction="sum"),
        batch_size=16,
    ).compile(backend=BACKEND)
    fill(agent, 64)
    with pytest.warns(CompileFallbackWarning) as record:
        for _ in range(3):
            agent.update()
    messages = [str(w.message) for w in record if issubclass(w.category, CompileFallbackWarning)]
    assert len(messages) == 1 and "the step of DQN.qnet_optim cannot be compiled" in messages[0]
    assert [g["fused"] for g in agent.qnet_optim.param_groups] == [True]
    assert agent.qnet_optim.state  # it stepped


def test_a_compiled_update_keeps_its_plain_step_after_loading_an_eager_optimizer_state():
    eager, compiled = twins(dqn)
    for agent in (eager, compiled):
        fill(agent, 64)
    train(eager, 3, compiled=False)
    train(compiled, 3, compiled=True)
    saved = eager.qnet_optim.state_dict()  # an eager run's checkpoint: fused Adam
    assert [g["fused"] for g in saved["param_groups"]] == [True]
    compiled.qnet_optim.load_state_dict(saved)
    assert [g["fused"] for g in compiled.qnet_optim.param_groups] == [False]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        compiled.update()
    assert (
        float(compiled.qnet_optim.state[compiled.qnet.net[0].weight]["step"]) == 4
    )  # 3 loaded + 1


class NeedsHidden(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp(S, 2)

    def forward(self, state, hidden):
        return self.net(state) + hidden


def test_user_errors_surface_as_in_eager_without_a_fallback_warning():
    from machin.frame.algorithms.utils import MissingArgumentError

    q = NeedsHidden()
    agent = DQN(q, copy.deepcopy(q), torch.optim.Adam, nn.MSELoss(reduction="sum"), batch_size=4)
    fill(agent, 8)
    agent.compile(backend=BACKEND)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        with pytest.raises(MissingArgumentError, match="hidden"):
            agent.update()


def test_non_finite_loss_still_skips_the_step_when_compiled():
    torch.manual_seed(0)
    agent = dqn("vanilla")
    fill(agent, 32)
    agent.compile(backend=BACKEND)
    agent.update()
    with torch.no_grad():
        agent.qnet.net[2].bias.fill_(math.inf)
    before = [p.detach().clone() for p in agent.qnet.parameters()]
    state = copy.deepcopy(agent.qnet_optim.state_dict())
    with pytest.warns(RuntimeWarning, match="not finite"):
        agent.update()
    assert agent.skipped_updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, agent.qnet.parameters()))
    assert torch.equal(
        state["state"][0]["exp_avg"], agent.qnet_optim.state_dict()["state"][0]["exp_avg"]
    )


def test_compile_keeps_the_networks_and_their_checkpoints(tmp_path):
    agent = dqn("fixed_target")
    qnet, keys = agent.qnet, list(agent.qnet.state_dict())
    assert agent.compile(backend=BACKEND) is agent
    fill(agent, 32)
    agent.update()
    assert agent.qnet is qnet and list(agent.qnet.state_dict()) == keys
    agent.save(str(tmp_path))
    saved = [p.detach().clone() for p in agent.qnet_target.parameters()]
    agent.update()  # moves the target away from the checkpoint
    agent.load(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(agent.qnet_target.parameters(), saved))
    assert all(
        torch.equal(a, b) for a, b in zip(agent.qnet.parameters(), saved)
    )  # _post_load copied it
    agent.update()  # the compiled steps still train the loaded networks
    assert not all(torch.equal(a, b) for a, b in zip(agent.qnet.parameters(), saved))


def test_bad_settings_are_refused_at_compile_time():
    with pytest.raises(ValueError, match="torch.compile does not accept these settings"):
        dqn().compile(backend="no_such_backend")


@pytest.mark.parametrize(
    "options", [None, {"cpp_wrapper": True}], ids=["python-wrapper", "cpp-wrapper"]
)
def test_one_small_inductor_compile_matches_eager(options):
    eager, compiled = twins(
        lambda: dqn("vanilla")
    )  # two graphs: the TD loss with its gradients, Adam's step
    fill(eager, 64)
    fill(compiled, 64)
    expected = train(eager, 3, compiled=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        compiled.compile(
            options=options
        )  # inductor, generated C++ (cpp_wrapper: the calling code too)
        got = train(compiled, 3, compiled=False)
    np.testing.assert_allclose(np.array(got), np.array(expected), rtol=1e-4, atol=1e-5)
    for want, have in zip(eager.qnet.parameters(), compiled.qnet.parameters()):
        assert torch.allclose(have, want, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_graphs_on_a_gpu_match_eager_and_compile_once(name):
    # inductor with CUDA graphs (reduce-overhead's), random numbers drawn as eager draws them
    with torch.device(
        "cuda"
    ):  # networks (and SAC's temperature) built on the GPU; data stored on the CPU
        eager, compiled = twins(CASES[name])
    if isinstance(compiled, SAC):
        assert compiled.log_alpha.is_cuda  # beside the actor
    if not isinstance(eager, A2C):
        fill(eager, 64)
        fill(compiled, 64)
    expected = train(eager, 30, compiled=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        compiled.compile(options={"triton.cudagraphs": True, "fallback_random": True})
        assert compiled._compiled_steps.cudagraphs
        got, (warm, last) = train(compiled, 30, compiled=False, graphs_after=10)
    assert compiled._compiled_steps.disabled is None
    assert last == warm, f"{name}: {last - warm} recompilation(s) in 20 updates after the warm-up"
    np.testing.assert_allclose(
        np.array(got, dtype=float), np.array(expected, dtype=float), rtol=1e-3, atol=1e-4
    )
    for key, network in networks(eager).items():
        for (param_name, want), have in zip(
            network.named_parameters(), networks(compiled)[key].parameters()
        ):
            assert have.is_cuda
            assert torch.allclose(have, want, rtol=1e-3, atol=1e-4), (
                f"{name}: {key}.{param_name} differs"
            )


def test_a_traced_safe_calls_plan_follows_safe_calls_rules():
    # While tracing, safe_call's plan (the inputs it passes, the device it moves them to) is
    # computed once, at compile time, from the network itself (a constant from torch 2.13 on).
    from machin.frame.algorithms.compiled import _call_plan

    agent = dqn("double").compile(backend=BACKEND)
    picks, device = _call_plan(agent.qnet, (("state", "other"),), ())
    assert picks == (("state", 0),) and device == torch.device("cpu")  # where its parameters are
    assert _call_plan(agent.qnet.net[0], (("input",),), ())[0] == (("input", 0),)  # a submodule too
    assert _call_plan(agent.qnet, (None, ("state",)), ())[0] == (
        ("state", 1),
    )  # from the second dict
    with pytest.raises(TypeError, match="misses forward arguments"):
        _call_plan(agent.qnet, (("observation",),), ())
    with pytest.raises(TypeError, match=r"misses forward arguments \['extra'\]"):
        _call_plan(QNet(), (("state",),), ("extra",))
