"""GAIL: discriminator loss and generator reward by hand, expert storage, configs, CartPole imitation."""

import json
import math
import warnings

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms import GAIL, PPO, TRPO
from machin.frame.algorithms.config import ConfigError
from machin.frame.algorithms.gail import ExpertTransition, GAILResult, binary_cross_entropy

from .contract import ContractCase
from .nets import CategoricalActor, ValueCritic, episode_steps, mlp, step_dict


class Discriminator(nn.Module):
    """Probability that ``(state, discrete action)`` comes from the learner."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 16):
        super().__init__()
        self.action_num = action_num
        self.net = mlp(state_dim + action_num, 1, hidden)

    def forward(self, state, action):
        one_hot = nn.functional.one_hot(action.view(-1).long(), self.action_num).to(state.dtype)
        return torch.sigmoid(self.net(torch.cat([state, one_hot], dim=1)))


class FeatureDiscriminator(nn.Module):
    """``D(s, a) = scale * s[:, 0]``: outputs the test chooses through the states."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, state, action):
        return self.scale * state[:, :1]


def expert_steps(length: int, seed: int = 1):
    return [{"state": s["state"], "action": s["action"]} for s in episode_steps(length, seed=seed)]


def make(discriminator=None, generator_options=None, **options):
    torch.manual_seed(0)
    generator = PPO(
        CategoricalActor(hidden=16),
        ValueCritic(hidden=16),
        torch.optim.Adam,
        nn.MSELoss(),
        **{"batch_size": 8, **(generator_options or {})},
    )
    return GAIL(discriminator or Discriminator(), generator, torch.optim.Adam, **options)


def _store(agent, experience):
    agent.store_expert_episode(experience["expert"])
    agent.store_episode(experience["episode"])


def _store_nan(agent, experience):
    """NaN in the expert states and in the generator's rewards, stored past the checks."""
    agent.expert_replay_buffer.check_finite = False
    agent.replay_buffer.check_finite = False
    expert = [
        {"state": {"state": torch.full((1, 4), math.nan)}, "action": step["action"]}
        for step in experience["expert"]
    ]
    agent.store_expert_episode(expert)
    agent.constrained_policy_optimization.store_episode(
        [{**step, "reward": math.nan} for step in experience["episode"]]
    )


CONTRACT_CASES = {
    GAIL: ContractCase(
        args=lambda: (
            Discriminator(),
            PPO(
                CategoricalActor(hidden=16),
                ValueCritic(hidden=16),
                torch.optim.Adam,
                nn.MSELoss(),
                batch_size=8,
            ),
            torch.optim.Adam,
        ),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: {"expert": expert_steps(12), "episode": episode_steps(12)},
        store=_store,
        store_nan_rewards=_store_nan,
        trains={
            "update_discriminator": ["discriminator"],
            "update_policy": ["actor"],
            "update_value": ["critic"],
        },
    ),
}


def parameters(network):
    return [p.detach().clone() for p in network.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# -- the discriminator's loss and the generator's reward, by hand ----------------------------
def probability_steps(probabilities, action=0):
    """Steps whose first state feature is the given probability (read by FeatureDiscriminator)."""
    return [
        step_dict(
            [p, 0.0, 0.0, 0.0], [[action]], [p, 0.0, 0.0, 0.0], 1.0, i == len(probabilities) - 1
        )
        for i, p in enumerate(probabilities)
    ]


def test_discriminator_loss_and_step_match_a_hand_computation():
    learner_p, expert_p = [0.5, 0.8, 0.25], [0.2, 0.5]
    gail = make(FeatureDiscriminator(), batch_size=10)
    gail.discriminator_optim = torch.optim.SGD(gail.discriminator.parameters(), lr=0.1)
    gail.store_expert_episode(
        [{"state": s["state"], "action": s["action"]} for s in probability_steps(expert_p)]
    )
    gail.store_episode(probability_steps(learner_p))
    # BCE(D(learner), 1) + BCE(D(expert), 0), each a mean over its batch (the whole buffers here)
    expected = -sum(math.log(p) for p in learner_p) / 3 - sum(math.log(1 - p) for p in expert_p) / 2
    measured = gail.update(update_value=False, update_policy=False, update_discriminator=False)
    assert isinstance(measured, GAILResult)
    assert measured.discriminator_loss == pytest.approx(expected, rel=1e-6)
    assert gail.discriminator.scale.item() == 1.0  # measured only

    gail.store_episode(probability_steps(learner_p))
    result = gail.update(update_value=False, update_policy=False)
    assert result.discriminator_loss == pytest.approx(expected, rel=1e-6)
    # d loss / d scale at scale 1: -1 (from every learner term) + mean(e / (1 - e)) of the expert
    gradient = -1.0 + sum(p / (1 - p) for p in expert_p) / 2
    assert gail.discriminator.scale.item() == pytest.approx(1.0 - 0.1 * gradient, rel=1e-6)


def test_the_default_criterion_is_bce_and_lets_nan_through():
    probability = torch.tensor([[0.1], [0.7], [0.0], [1.0], [0.5]])
    target = torch.tensor([[1.0], [0.0], [1.0], [0.0], [1.0]])
    expected = nn.BCELoss()(probability, target).item()  # log(0) counts as -100 in both
    assert binary_cross_entropy(probability, target).item() == pytest.approx(expected, rel=1e-6)
    assert math.isnan(binary_cross_entropy(torch.tensor([[math.nan]]), torch.ones(1, 1)).item())


def test_generator_is_rewarded_with_minus_log_d_and_the_input_is_kept():
    gail = make(FeatureDiscriminator())
    episode = probability_steps([0.5, 0.1, 0.0])
    gail.store_episode(episode)
    _, (rewards,) = gail.replay_buffer.sample_batch(
        0, True, sample_method="all", sample_attrs=["reward"]
    )
    # -log D, with D taken no lower than 1e-8 (so the last reward is finite)
    assert rewards.view(-1).tolist() == pytest.approx(
        [math.log(2.0), -math.log(0.1), -math.log(1e-8)], rel=1e-5
    )
    assert [step["reward"] for step in episode] == [1.0, 1.0, 1.0]
    state = {"state": torch.tensor([[0.25, 0, 0, 0], [1.0, 0, 0, 0]])}
    reward = gail.reward(state, {"action": torch.zeros(2, 1, dtype=torch.long)})
    assert reward.shape == (2, 1)
    assert reward.view(-1).tolist() == pytest.approx([math.log(4.0), 0.0], abs=1e-6)


def test_transition_objects_are_relabelled_with_their_custom_attributes():
    from machin.frame.transition import Transition

    gail = make(FeatureDiscriminator())
    steps = [Transition(**{**s, "truncated": False}) for s in probability_steps([0.5, 0.5])]
    gail.store_episode(steps)
    _, (rewards, truncated) = gail.replay_buffer.sample_batch(
        0, True, sample_method="all", sample_attrs=["reward", "truncated"]
    )
    assert rewards.view(-1).tolist() == pytest.approx([math.log(2.0)] * 2, rel=1e-5)
    assert truncated == [False, False]
    assert all(step.reward == 1.0 for step in steps)


# -- the discriminator step trains the discriminator alone -----------------------------------
def test_the_discriminator_step_reaches_only_the_discriminator():
    gail = make()
    _store(gail, {"expert": expert_steps(12), "episode": episode_steps(12)})
    before = {name: parameters(getattr(gail, name)) for name in GAIL._is_top}
    result = gail.update(update_value=False, update_policy=False)
    assert math.isfinite(result.discriminator_loss)
    assert not same(before["discriminator"], parameters(gail.discriminator))
    assert all(p.grad is not None for p in gail.discriminator.parameters())
    for name in ("actor", "critic"):
        network = getattr(gail, name)
        assert same(before[name], parameters(network)), name
        assert all(p.grad is None for p in network.parameters()), name
    assert gail.replay_buffer.size() == 0  # the generator's update emptied its buffer


def test_update_needs_expert_steps_and_learner_steps():
    gail = make()
    assert gail.update() is None  # nothing collected yet
    gail.store_episode(episode_steps(4))
    with pytest.raises(
        ValueError, match="the expert buffer is empty: store them with store_expert_episode"
    ):
        gail.update()


def test_discriminator_update_times_and_the_result_names():
    gail = make(discriminator_update_times=3)
    steps = []
    gail.discriminator_optim.register_step_post_hook(lambda *_: steps.append(1))
    _store(gail, {"expert": expert_steps(12), "episode": episode_steps(12)})
    policy_value, value_loss, discriminator_loss = gail.update()
    assert len(steps) == 3
    assert all(isinstance(v, float) for v in (policy_value, value_loss, discriminator_loss))


# -- expert storage ----------------------------------------------------------------------------
def test_expert_steps_missing_keys_get_machins_error_naming_them():
    gail = make()
    state = {"state": torch.zeros(1, 4)}
    with pytest.raises(
        ValueError,
        match=r"Transition object missing attributes: the expert transition is missing required "
        r"attribute\(s\) \['action'\]; it has \['state'\]",
    ):
        gail.store_expert_transition({"state": state})
    good = {"state": state, "action": {"action": torch.zeros(1, 1, dtype=torch.long)}}
    with pytest.raises(
        ValueError, match=r"expert episode\[1\] is missing required attribute\(s\) \['state'\]"
    ):
        gail.store_expert_episode([good, {"action": good["action"]}])
    assert gail.expert_replay_buffer.size() == 0  # nothing of the refused episode was stored
    with pytest.raises(
        TypeError, match="the expert transition must be an ExpertTransition.*got list"
    ):
        gail.store_expert_transition([state])
    with pytest.raises(
        ValueError, match=r"episode\[0\] is missing required attribute\(s\) \['action'\]"
    ):
        gail.store_episode([{"state": state, "next_state": state, "reward": 0.0, "terminal": True}])


def test_expert_steps_keep_state_and_action_only():
    gail = make()
    gail.store_expert_transition(ExpertTransition(**expert_steps(1)[0]))
    gail.store_expert_episode(episode_steps(3))  # full transitions: reward etc. are dropped
    assert gail.expert_replay_buffer.size() == 4
    _, (action,) = gail.expert_replay_buffer.sample_batch(
        0, True, sample_method="all", sample_attrs=["action"]
    )
    assert action["action"].view(-1).tolist() == [0, 0, 1, 0]
    with pytest.raises(ValueError, match="holds batch size 1"):
        ExpertTransition({"state": torch.zeros(2, 4)}, {"action": torch.zeros(2, 1)})


# -- construction, checkpoints, schedulers -----------------------------------------------------
def test_the_generator_and_discriminator_are_checked():
    with pytest.raises(
        TypeError, match="constrained_policy_optimization must be an A2C-family .* got str"
    ):
        GAIL(Discriminator(), "PPO", torch.optim.Adam)
    generator = make().constrained_policy_optimization
    with pytest.raises(TypeError, match="discriminator must be a torch.nn.Module, got function"):
        GAIL(lambda s, a: s, generator, torch.optim.Adam)
    with pytest.raises(
        ValueError, match="discriminator_update_times must be a positive integer, got 0"
    ):
        make(discriminator_update_times=0)


def test_the_generators_parts_are_forwarded_and_trpo_works():
    gail = make()
    generator = gail.constrained_policy_optimization
    assert gail.actor is generator.actor and gail.critic is generator.critic
    assert (
        gail.actor_optim is generator.actor_optim and gail.replay_buffer is generator.replay_buffer
    )
    torch.manual_seed(0)
    trpo = TRPO(CategoricalActor(hidden=16), ValueCritic(hidden=16), torch.optim.Adam, nn.MSELoss())
    gail = GAIL(Discriminator(), trpo, torch.optim.Adam, batch_size=8)
    _store(gail, {"expert": expert_steps(12), "episode": episode_steps(12)})
    before = parameters(gail.actor)
    assert gail.update() is not None
    assert gail.actor_optim is None and not same(before, parameters(gail.actor))


def test_save_and_load_include_the_discriminator(tmp_path):
    gail = make()
    _store(gail, {"expert": expert_steps(12), "episode": episode_steps(12)})
    gail.update()
    gail.save(str(tmp_path), version=2)
    assert {"actor_2.pt", "critic_2.pt", "discriminator_2.pt"} <= {
        p.name for p in tmp_path.iterdir()
    }
    torch.manual_seed(5)
    fresh = make()
    with torch.no_grad():
        for p in fresh.discriminator.parameters():
            p.add_(1.0)
    fresh.load(str(tmp_path))
    assert same(parameters(fresh.discriminator), parameters(gail.discriminator))


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_one_scheduler_slot_for_the_discriminator_and_the_generators_step_too():
    torch.manual_seed(0)
    generator = PPO(
        CategoricalActor(hidden=16),
        ValueCritic(hidden=16),
        torch.optim.Adam,
        nn.MSELoss(),
        lr_scheduler=torch.optim.lr_scheduler.StepLR,
        lr_scheduler_args=((1, 0.5), (1, 0.5)),
    )
    gail = GAIL(
        Discriminator(),
        generator,
        torch.optim.Adam,
        lr_scheduler=torch.optim.lr_scheduler.StepLR,
        lr_scheduler_args=((1, 0.1),),
    )
    gail.update_lr_scheduler()
    assert gail.discriminator_optim.param_groups[0]["lr"] == pytest.approx(1e-4)
    assert gail.actor_optim.param_groups[0]["lr"] == pytest.approx(5e-4)
    with pytest.raises(
        ValueError,
        match=r"lr_scheduler_args must hold one tuple of arguments per optimizer \(1 here\)",
    ):
        make(lr_scheduler=torch.optim.lr_scheduler.StepLR, lr_scheduler_args=((1,), (1,)))


# -- configs (Machin 0.4's layout) -------------------------------------------------------------
def gail_config(tmp_path):
    config = GAIL.generate_config({})
    frame_config = config["frame_config"]
    frame_config["models"] = ["tests.frame.algorithms.test_gail.Discriminator"]
    frame_config["batch_size"] = 8
    ppo = frame_config["PPO_config"]["frame_config"]
    ppo["models"] = [
        "tests.frame.algorithms.nets.CategoricalActor",
        "tests.frame.algorithms.nets.ValueCritic",
    ]
    ppo["model_kwargs"] = [{"hidden": 8}, {"hidden": 8}]
    ppo["batch_size"] = 8
    frame_config["expert_trajectory_path"] = str(tmp_path / "trajectory.data")
    return json.loads(json.dumps(config))  # what a config file gives back


def test_a_generated_config_builds_and_trains_a_step(tmp_path):
    config = gail_config(tmp_path)
    assert (
        config["frame"] == "GAIL"
        and config["frame_config"]["constrained_policy_optimization"] == "PPO"
    )
    assert config["frame_config"]["TRPO_config"]["frame"] == "TRPO"
    torch.save([expert_steps(6), expert_steps(5, seed=2)], tmp_path / "trajectory.data")
    torch.manual_seed(0)
    gail = GAIL.init_from_config(config)
    assert isinstance(gail.constrained_policy_optimization, PPO) and gail.batch_size == 8
    assert gail.expert_replay_buffer.size() == 11  # the trajectory file was stored
    before = parameters(gail.discriminator)
    gail.store_episode(episode_steps(12))
    result = gail.update()
    assert math.isfinite(result.discriminator_loss)
    assert not same(before, parameters(gail.discriminator))
    assert GAIL.generate_config(config) == config  # complete already: nothing changes


def test_config_errors_name_the_key(tmp_path):
    config = gail_config(tmp_path)
    config["frame_config"]["constrained_policy_optimization"] = "SAC"
    with pytest.raises(
        ConfigError,
        match=r"constrained_policy_optimization must be one of \['PPO', 'TRPO'\], got 'SAC'",
    ):
        GAIL.init_from_config(config)
    config = gail_config(tmp_path)
    config["frame_config"]["discriminator_lr"] = 0.1
    with pytest.raises(ConfigError, match="unknown key frame_config.discriminator_lr for GAIL"):
        GAIL.init_from_config(config)
    config = gail_config(tmp_path)
    config["frame_config"]["batch_size"] = 0
    with pytest.raises(
        ConfigError, match="frame_config of GAIL refused: batch_size must be a positive integer"
    ):
        GAIL.init_from_config(config)


# -- learning: imitate a scripted CartPole expert ----------------------------------------------
class GreedyActor(CategoricalActor):
    """CategoricalActor with ``deterministic``: its most likely action when asked."""

    def forward(self, state, action=None, deterministic=False):
        if action is None and deterministic:
            action = self.net(state).argmax(dim=1, keepdim=True)
        return super().forward(state, action)


def expert_action(obs) -> int:
    """The scripted expert: push the cart towards where the pole is falling."""
    return int(obs[2] + 0.5 * obs[3] > 0)


def as_state(obs):
    return {"state": torch.as_tensor(obs, dtype=torch.float32).view(1, -1)}


def play(env, policy, seed):
    """One episode with ``policy(obs, state)`` (an action ``[1, 1]``); its steps and return."""
    obs, _ = env.reset(seed=seed)
    steps, total, done = [], 0.0, False
    while not done:
        state = as_state(obs)
        action = policy(obs, state)
        action = torch.as_tensor(action).view(1, 1)
        obs, reward, terminated, truncated, _ = env.step(int(action.item()))
        steps.append(
            {
                "state": state,
                "action": {"action": action},
                "next_state": as_state(obs),
                "reward": float(reward),
                "terminal": terminated,
            }
        )
        total, done = total + reward, terminated or truncated
    return steps, total


@pytest.mark.learning
def test_gail_imitates_a_scripted_cartpole_expert():
    """10 episodes of the scripted expert; PPO learns from -log D alone (never the env's reward)."""
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    generator = PPO(
        GreedyActor(hidden=32),
        ValueCritic(hidden=32),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=256,
        actor_update_times=4,
        actor_learning_rate=0.003,
        critic_learning_rate=0.003,
        gae_lambda=0.95,
        value_target="lambda_return",
        joint_update=True,
    )
    gail = GAIL(
        Discriminator(hidden=32),
        generator,
        torch.optim.Adam,
        batch_size=256,
        discriminator_update_times=5,
        discriminator_learning_rate=0.002,
    )
    expert_returns = []
    for episode in range(10):
        steps, total = play(env, lambda obs, _: expert_action(obs), seed=1000 + episode)
        gail.store_expert_episode(steps)
        expert_returns.append(total)
    assert min(expert_returns) == 500.0  # the scripted expert is perfect

    agreement = []

    def greedy(obs, state):
        action = gail.act(state, deterministic=True)[0]
        agreement.append(int(action.item()) == expert_action(obs))
        return action

    seed, updates, greedy_returns = 0, 0, [0.0]
    while updates < 40:  # 2048 learner steps per update
        lengths = []
        while sum(lengths) < 2048:
            seed += 1
            steps, _ = play(env, lambda _, state: gail.act(state)[0], seed)
            gail.store_episode(steps)
            lengths.append(len(steps))
        gail.update()
        updates += 1
        if sum(lengths) / len(lengths) >= 150:  # evaluate once the sampled episodes are long
            agreement.clear()
            greedy_returns = [play(env, greedy, 10_000 + i)[1] for i in range(3)]
            if min(greedy_returns) >= 450:
                break
    share = sum(agreement) / max(len(agreement), 1)
    print(
        f"GAIL: greedy returns {greedy_returns} after {updates} updates ({seed} episodes), "
        f"greedy actions equal to the expert's in {share:.0%} of the states"
    )
    assert min(greedy_returns) >= 450, f"GAIL's greedy returns {greedy_returns} stayed below 450"
    assert share >= 0.75, f"the greedy learner took the expert's action in only {share:.0%}"


def test_no_warning_for_documented_calls():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gail = make()
        _store(gail, {"expert": expert_steps(4), "episode": episode_steps(4)})
        result = gail.update(concatenate_samples=True)
        gail.act({"state": torch.zeros(1, 4)})
    assert not caught, [str(w.message) for w in caught]
    assert result is not None
