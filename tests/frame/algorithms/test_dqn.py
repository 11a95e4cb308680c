import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms import DQN
from machin.frame.algorithms.dqn import DQN as DQNFromModule

from .contract import ContractCase
from .loops import train
from .nets import DuelingQNet, QNet, QNetWithHidden, parameters, same, transition


class LinearQ(nn.Module):
    """Q(s) = W s with hand-set weights, for hand-computed targets."""

    def __init__(self, weight):
        super().__init__()
        self.fc = nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor(weight, dtype=torch.float32))

    def forward(self, state):
        return self.fc(state)


def make(mode="double", qnet=None, qnet_target=None, **kwargs):
    torch.manual_seed(0)
    qnet = qnet or QNet()
    qnet_target = qnet_target or QNet()
    kwargs.setdefault("batch_size", 8)
    return DQN(qnet, qnet_target, torch.optim.SGD, nn.MSELoss(reduction="sum"), mode=mode, **kwargs)


def fill(dqn, n=16, state_dim=4):
    for i in range(n):
        dqn.store_transition(
            transition(torch.randn(state_dim), i % 2, torch.randn(state_dim), 1.0, i % 5 == 0)
        )


CONTRACT_CASES = {
    DQN: ContractCase(
        args=lambda: (QNet(hidden=16), QNet(hidden=16), torch.optim.Adam, nn.MSELoss()),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act_discrete(state, use_target=True),
        explore=lambda agent, state: agent.act_discrete_with_noise(state),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: [
            transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)
        ],
        trains={"update_value": ["qnet"]},
    ),
}


def test_import_paths_and_class_attributes():
    assert DQN is DQNFromModule
    assert DQN._is_top == ["qnet", "qnet_target"]
    assert DQN._is_restorable == ["qnet_target"]
    assert DQN.get_restorable() == ["qnet_target"]


def test_bad_options_raise_clear_errors():
    with pytest.raises(ValueError, match="Unknown DQN mode: 'foo'"):
        make(mode="foo")
    with pytest.raises(ValueError, match="exactly one of update_rate"):
        make(update_rate=None)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        make(batch_size=0)


def test_modes_wire_target_network():
    vanilla = make("vanilla")
    assert vanilla.qnet_target is vanilla.qnet
    for mode in ("fixed_target", "double"):
        dqn = make(mode)
        assert dqn.qnet_target is not dqn.qnet
        assert same(parameters(dqn.qnet), parameters(dqn.qnet_target))


def test_act_discrete_shapes_dtypes_and_argmax():
    dqn = make()
    state = torch.randn(5, 4)
    action = dqn.act_discrete({"state": state, "ignored_key": 1})
    assert action.shape == (5, 1) and action.dtype == torch.long
    assert torch.equal(action, dqn.qnet(state).argmax(dim=1, keepdim=True))
    q = dqn.criticize({"state": state})
    assert q.shape == (5, 2)


def test_extra_outputs_are_returned_after_the_action():
    dqn = make(qnet=QNetWithHidden(), qnet_target=QNetWithHidden())
    action, hidden = dqn.act_discrete({"state": torch.randn(3, 4)})
    assert action.shape == (3, 1) and hidden.shape == (3, 3)
    action, hidden = dqn.act_discrete_with_noise(
        {"state": torch.randn(3, 4), "hidden": torch.zeros(3, 3)}
    )
    assert torch.equal(hidden, torch.ones(3, 3))


def test_noisy_action_explores_and_epsilon_decays():
    dqn = make(epsilon_decay=0.5)
    state = torch.randn(1, 4)
    greedy = dqn.act_discrete({"state": state}).item()
    torch.manual_seed(1)
    dqn.epsilon = 1.0
    actions = set()
    for _ in range(20):
        dqn.epsilon = 1.0
        actions.add(dqn.act_discrete_with_noise({"state": state}).item())
    assert actions == {0, 1}
    dqn.epsilon = 1.0
    dqn.act_discrete_with_noise({"state": state})
    assert dqn.epsilon == 0.5
    dqn.epsilon = 0.0
    assert dqn.act_discrete_with_noise({"state": state}, decay_epsilon=False).item() == greedy
    assert dqn.epsilon == 0.0


def test_exploration_draws_from_torchs_generator_as_rand_and_randint_like_do():
    """One state: the test is torch.rand(()) < epsilon, the random action torch.randint_like's draw."""
    dqn = make(epsilon=0.5, epsilon_decay=1.0)
    state = torch.randn(1, 4)
    greedy = dqn.act_discrete({"state": state})
    torch.manual_seed(3)
    actions = [dqn.act_discrete_with_noise({"state": state}).item() for _ in range(200)]
    torch.manual_seed(3)
    expected = []
    for _ in range(200):
        explore = torch.rand(()).item() < 0.5
        expected.append(torch.randint_like(greedy, 2).item() if explore else greedy.item())
    assert actions == expected
    explored = sum(a != greedy.item() for a in actions)
    assert 20 < explored < 80  # about a quarter: half explore, half of those pick the other action
    assert (
        dqn.act_discrete({"state": state}).item() == greedy.item()
    )  # overwriting explored actions left it alone


def test_use_target_acts_with_target_network():
    dqn = make("fixed_target")
    with torch.no_grad():
        for p in dqn.qnet_target.parameters():
            p.neg_()
    state = torch.randn(64, 4)
    assert torch.equal(dqn.criticize({"state": state}, use_target=True), dqn.qnet_target(state))
    assert not torch.equal(
        dqn.act_discrete({"state": state}, use_target=True), dqn.act_discrete({"state": state})
    )


def test_store_requires_terminal_and_episode_appends_all():
    dqn = make()
    bad = transition([0.0] * 4, 0, [0.0] * 4, 1.0, False)
    del bad["terminal"]
    with pytest.raises(ValueError, match="terminal"):
        dqn.store_transition(bad)
    dqn.store_episode([transition(torch.randn(4), 0, torch.randn(4), 1.0, False) for _ in range(7)])
    assert dqn.replay_buffer.size() == 7


@pytest.mark.parametrize("store", ["transition", "episode"])
def test_a_first_step_with_a_wide_reward_is_refused_where_it_is_stored(store):
    dqn = make()
    wide = {**transition([0.0] * 4, 0, [0.0] * 4, 0.0, False), "reward": torch.ones(1, 2)}
    with pytest.raises(
        ValueError,
        match=r"DQN stores one reward per transition \(a number or a tensor of shape "
        r"\[1, 1\]\), but the reward of this transition is a tensor of shape \[1, 2\]",
    ):
        dqn.store_transition(wide) if store == "transition" else dqn.store_episode([wide])
    assert dqn.replay_buffer.size() == 0
    dqn.store_transition(
        {**transition([0.0] * 4, 0, [0.0] * 4, 0.0, False), "reward": torch.ones(1, 1)}
    )
    assert dqn.replay_buffer.size() == 1


@pytest.mark.parametrize("mode", ["vanilla", "fixed_target", "double"])
def test_targets_match_hand_computation(mode):
    # online Q(s) = [s0 + s1, 2 s0], target Q(s) = [3 s0, s1]
    online = LinearQ([[1.0, 1.0], [2.0, 0.0]])
    target = LinearQ([[3.0, 0.0], [0.0, 1.0]])
    dqn = DQN(
        online,
        target,
        torch.optim.SGD,
        nn.MSELoss(reduction="sum"),
        mode=mode,
        batch_size=1,
        discount=0.5,
    )
    if mode != "vanilla":  # construction copied online into target: restore the hand-set target
        with torch.no_grad():
            dqn.qnet_target.fc.weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 1.0]]))
    dqn.store_transition(transition([1.0, 0.0], 0, [1.0, 4.0], 2.0, False))
    batch = dqn._sample(True)
    # next state s' = (1, 4): online Q = [5, 2], target Q = [3, 4]
    expected_next = {"vanilla": 5.0, "fixed_target": 4.0, "double": 3.0}[mode]
    assert dqn._bellman_target(batch).item() == pytest.approx(2.0 + 0.5 * expected_next)
    assert dqn._predicted_value(batch).item() == pytest.approx(1.0)  # Q_online(s=(1,0))[0]


def test_terminal_zeroes_bootstrap():
    reward = torch.tensor([[1.0], [1.0]])
    value = torch.tensor([[10.0], [10.0]])
    terminal = torch.tensor([[0.0], [1.0]])
    out = DQN.reward_function(reward, 0.9, value, terminal, {})
    assert torch.allclose(out, torch.tensor([[10.0], [1.0]]))
    assert DQN.action_get_function({"action": reward}) is reward


def test_update_trains_online_and_soft_updates_target():
    dqn = make("double", update_rate=0.25)
    fill(dqn)
    online_before, target_before = parameters(dqn.qnet), parameters(dqn.qnet_target)
    loss = dqn.update()
    assert isinstance(loss, float) and math.isfinite(loss)
    online_after, target_after = parameters(dqn.qnet), parameters(dqn.qnet_target)
    assert not same(online_before, online_after)
    for t0, o1, t1 in zip(target_before, online_after, target_after):
        assert torch.allclose(t1, 0.75 * t0 + 0.25 * o1, atol=1e-6)


def test_hard_target_copies_every_update_steps():
    dqn = make("fixed_target", update_rate=None, update_steps=3)
    fill(dqn)
    target = parameters(dqn.qnet_target)
    dqn.update()
    dqn.update()
    assert same(target, parameters(dqn.qnet_target))
    dqn.update()
    assert same(parameters(dqn.qnet), parameters(dqn.qnet_target))


def test_update_on_empty_buffer_returns_none():
    assert make().update() is None


def test_dueling_network_trains_in_every_mode():
    for mode in ("vanilla", "fixed_target", "double"):
        dqn = make(mode, qnet=DuelingQNet(), qnet_target=DuelingQNet())
        fill(dqn)
        before = parameters(dqn.qnet)
        assert math.isfinite(dqn.update())
        assert not same(before, parameters(dqn.qnet))


def test_lr_scheduler_steps():
    dqn = make(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda step: 0.5**step,),),
        learning_rate=0.1,
    )
    fill(dqn)
    dqn.update()
    dqn.update_lr_scheduler()
    assert dqn.qnet_optim.param_groups[0]["lr"] == pytest.approx(0.05)


def test_missing_state_key_names_network_and_argument():
    dqn = make()
    with pytest.raises(TypeError, match=r"QNet.forward requires argument\(s\) \['state'\].*'obs'"):
        dqn.act_discrete({"obs": torch.randn(1, 4)})


@pytest.mark.learning
def test_double_dqn_learns_cartpole():
    torch.manual_seed(0)
    dqn = DQN(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    result = train(
        dqn,
        lambda: gym.make("CartPole-v0"),
        seed=0,
        episodes=400,
        solved_reward=150,
        solved_repeat=5,
        warmup_steps=500,
    )
    print(
        f"DQN (double) solved CartPole-v0 at episode {result.solved_episode} ({result.steps} steps)"
    )
    assert result.solved_episode is not None, (
        "DQN did not reach a smoothed return of 150 within 400 episodes"
    )


def test_n_step_episode_targets_at_episode_end_and_truncation():
    dqn = make("fixed_target", n_step=2, discount=0.5)
    with pytest.raises(RuntimeError, match="store_episode"):
        dqn.store_transition(transition([0.0] * 4, 0, [0.0] * 4, 1.0, False))
    # a truncated episode (last terminal False) of three steps with rewards 1, 2, 4
    episode = [
        transition([float(i)] * 4, 0, [float(i + 1)] * 4, r, False)
        for i, r in enumerate([1.0, 2.0, 4.0])
    ]
    dqn.store_episode(episode)
    size, (reward, next_state, terminal, steps) = dqn.replay_buffer.sample_batch(
        10,
        sample_method="all",
        sample_attrs=["reward", "next_state", "terminal", "steps"],
        additional_concat_attrs=["steps"],
    )
    assert reward.view(-1).tolist() == [1 + 0.5 * 2, 2 + 0.5 * 4, 4.0]
    assert steps.view(-1).tolist() == [2, 2, 1]
    assert next_state["state"][:, 0].tolist() == [2.0, 3.0, 3.0]
    assert terminal.view(-1).tolist() == [False, False, False]
    # the target bootstraps with discount ** steps, also from the truncated last step
    batch = dqn._sample(True)
    with torch.no_grad():
        next_value = dqn.qnet_target(batch.next_state["state"]).max(1, keepdim=True).values
    steps = torch.tensor(batch.others["steps"], dtype=torch.float32).view(-1, 1)
    expected = batch.reward + 0.5**steps * next_value
    assert torch.allclose(dqn._bellman_target(batch), expected)
    # a terminated episode stops bootstrapping at its last step
    dqn.replay_buffer.clear()
    dqn.store_episode(
        [
            transition([0.0] * 4, 0, [1.0] * 4, 1.0, False),
            transition([1.0] * 4, 0, [2.0] * 4, 1.0, True),
        ]
    )
    batch = dqn._sample(True)
    assert torch.allclose(
        dqn._bellman_target(batch), batch.reward
    )  # both windows end in the terminal state
