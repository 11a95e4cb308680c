"""What a newcomer hit (issue 44, section 3): greedy actions of stochastic policies, a
gymnasium id as the trainer's environment, schedules that cannot advance, progress in log files."""

import inspect
import io
import warnings

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.auto.networks import CategoricalActor as AutoCategoricalActor
from machin.auto.networks import GaussianActor, SquashedGaussianActor
from machin.env.wrappers import ParallelWrapperDummy
from machin.frame.algorithms import A2C, A3C, DQN, IMPALA, PPO, SAC, TRPO
from machin.frame.callbacks import ProgressBar
from machin.frame.sampler import VecSampler
from machin.frame.trainer import Trainer
from machin.utils.compat import ExtraArgumentsWarning
from machin.utils.schedules import LinearSchedule
from tests.frame.algorithms.nets import (
    CategoricalActor,
    QCritic,
    QNet,
    TanhGaussianActor,
    ValueCritic,
)


# -- actors that take ``deterministic`` -------------------------------------------------------
class GreedyCategoricalActor(CategoricalActor):
    """A categorical policy whose most likely action is the argmax; records what it was asked."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = []

    def forward(self, state, action=None, deterministic=False):
        self.asked.append(deterministic)
        if action is None and deterministic:
            action = self.net(state).argmax(dim=1, keepdim=True)
        return super().forward(state, action)


class GreedyTanhGaussianActor(TanhGaussianActor):
    """A squashed Gaussian policy whose most likely action is ``tanh(mean)`` in the range."""

    def forward(self, state, action=None, deterministic=False):
        if action is None and deterministic:
            action = torch.tanh(self.mu(self.body(state))) * self.action_range
        return super().forward(state, action)


class AnyKeywordActor(CategoricalActor):
    """Takes ``**kwargs``: ``deterministic`` reaches it through them."""

    def forward(self, state, action=None, **kwargs):
        if action is None and kwargs.get("deterministic"):
            action = self.net(state).argmax(dim=1, keepdim=True)
        return super().forward(state, action)


def a2c_family(cls, actor):
    torch.manual_seed(0)
    return cls(actor, ValueCritic(4), torch.optim.Adam, nn.MSELoss(), batch_size=8)


def sac(actor):
    torch.manual_seed(0)
    critics = [QCritic(hidden=8) for _ in range(4)]
    return SAC(actor, *critics, torch.optim.Adam, nn.MSELoss(), batch_size=8)


# -- 1. deterministic act -----------------------------------------------------------------------
def test_sac_deterministic_act_is_the_squashed_mean_and_repeats():
    torch.manual_seed(1)
    actor = GreedyTanhGaussianActor(hidden=16)
    agent = sac(actor)
    state = {"state": torch.randn(5, 3)}
    first = agent.act(state, deterministic=True)
    second = agent.act(state, deterministic=True)
    expected = torch.tanh(actor.mu(actor.body(state["state"]))) * 2.0
    assert torch.allclose(first[0], expected, atol=1e-5)
    assert torch.equal(first[0], second[0])
    assert len(first) == 3 and first[1].shape == (5, 1)  # the usual output format
    sampled = [agent.act(state)[0] for _ in range(2)]  # the default still samples
    assert not torch.equal(sampled[0], sampled[1])
    assert not torch.allclose(sampled[0], expected)
    assert agent.target_entropy == -1.0  # resolved from the greedy action too


@pytest.mark.parametrize("cls", [A2C, PPO, TRPO])
def test_a2c_family_deterministic_act_is_the_argmax(cls):
    actor = GreedyCategoricalActor(4, 3)
    agent = a2c_family(cls, actor)
    state = {"state": torch.randn(64, 4)}
    greedy = agent.act(state, deterministic=True)[0]
    assert torch.equal(greedy, actor.net(state["state"]).argmax(dim=1, keepdim=True))
    assert torch.equal(greedy, agent.act(state, deterministic=True)[0])
    sampled = agent.act(state)[0]
    assert not torch.equal(sampled, greedy)  # 64 samples of 3 actions: some differ
    assert actor.asked == [True, True, False]  # the key is passed only when asked for


def test_an_actor_taking_any_keyword_gets_deterministic_through_them():
    actor = AnyKeywordActor(4, 3)
    agent = a2c_family(PPO, actor)
    state = {"state": torch.randn(16, 4)}
    assert agent.can_act_deterministically()
    greedy = agent.act(state, deterministic=True)[0]
    assert torch.equal(greedy, actor.net(state["state"]).argmax(dim=1, keepdim=True))


@pytest.mark.parametrize("cls", [PPO, SAC])
def test_an_actor_without_deterministic_gets_an_error_saying_what_to_add(cls):
    agent = (
        a2c_family(PPO, CategoricalActor(4, 2)) if cls is PPO else sac(TanhGaussianActor(hidden=8))
    )
    dim = 4 if cls is PPO else 3
    actor_name = type(agent.actor).__name__
    assert not agent.can_act_deterministically()
    with pytest.raises(TypeError) as caught:
        agent.act({"state": torch.randn(2, dim)}, deterministic=True)
    message = str(caught.value)
    assert f"{cls.__name__}.act(state, deterministic=True)" in message
    assert f"the actor {actor_name} has no 'deterministic' parameter" in message
    assert "deterministic=False" in message and "most likely action" in message
    assert len(agent.act({"state": torch.randn(2, dim)})) == 3  # sampling still works
    with pytest.raises(TypeError, match="deterministic must be True or False, got 'yes'"):
        agent.act({"state": torch.randn(2, dim)}, deterministic="yes")


def test_act_keeps_the_0_3_4_signature_and_its_tolerance():
    for cls in (A2C, PPO, TRPO, SAC, A3C, IMPALA):
        parameters = inspect.signature(cls.act).parameters
        assert list(parameters) == ["self", "state", "_", "deterministic", "__"], cls
        assert parameters["deterministic"].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters["deterministic"].default is False
    actor = GreedyCategoricalActor(4, 3)
    agent = a2c_family(PPO, actor)
    with pytest.warns(ExtraArgumentsWarning, match="extra"):
        output = agent.act({"state": torch.randn(3, 4)}, "extra", extra=1)
    assert len(output) == 3 and actor.asked == [False]  # the extras do not make it greedy


class StandInServer:
    """A gradient / model server accessor that counts pulls."""

    def __init__(self):
        self.pulls = 0

    def pull(self, model):
        self.pulls += 1
        return False

    def push(self, model):
        return True


def test_a3c_and_impala_pass_deterministic_on_after_syncing():
    actor = GreedyCategoricalActor(4, 3)
    servers = (StandInServer(), StandInServer())
    a3c = A3C(actor, ValueCritic(4), nn.MSELoss(), servers)
    state = {"state": torch.randn(8, 4)}
    expected = actor.net(state["state"]).argmax(dim=1, keepdim=True)
    assert torch.equal(a3c.act(state, deterministic=True)[0], expected)
    assert servers[0].pulls == 1 and actor.asked == [True]

    impala = IMPALA.__new__(IMPALA)  # its buffer needs an RPC group; acting needs none
    impala.actor, impala.model_server, impala.is_syncing = actor, (StandInServer(),), True
    assert torch.equal(impala.act(state, deterministic=True)[0], expected)
    assert impala.model_server[0].pulls == 1 and actor.asked == [True, True]


def test_the_default_networks_of_machin_auto_act_greedily():
    torch.manual_seed(0)
    state = torch.randn(6, 4)
    categorical = AutoCategoricalActor(4, 3)
    action, log_prob, _ = categorical(state, deterministic=True)
    assert torch.equal(action, categorical.net(state).argmax(dim=1, keepdim=True))
    assert log_prob.shape == categorical(state)[1].shape

    gaussian = GaussianActor(4, 2)
    action, log_prob, _ = gaussian(state, deterministic=True)
    assert torch.equal(action, gaussian.net(state)) and log_prob.shape == (6, 1)

    squashed = SquashedGaussianActor(4, 2, low=[-2.0, 0.0], high=[2.0, 1.0])
    action, log_prob, _ = squashed(state, deterministic=True)
    mean = squashed.mean(torch.relu(squashed.body(state)))
    assert torch.allclose(action, squashed.bounds(torch.tanh(mean)))
    assert torch.equal(action, squashed(state, deterministic=True)[0]) and log_prob.shape == (6, 1)
    assert not torch.equal(action, squashed(state)[0])


def test_the_trainer_evaluates_greedily_when_the_actor_can():
    actor = GreedyCategoricalActor(4, 2)
    agent = a2c_family(PPO, actor)
    with Trainer(agent, lambda: gym.make("CartPole-v1"), progress=False, seed=0) as trainer:
        assert trainer.eval_act_kwargs == {"deterministic": True}
        trainer.run(1)  # training samples
        assert actor.asked and not any(actor.asked)
        actor.asked.clear()
        trainer.evaluate(2)
        assert actor.asked and all(actor.asked)
    # the actor cannot: evaluation samples, as training does
    plain = a2c_family(PPO, CategoricalActor(4, 2))
    with Trainer(plain, lambda: gym.make("CartPole-v1"), progress=False, seed=0) as trainer:
        assert trainer.eval_act_kwargs == {}
        assert trainer.evaluate(1) > 0
    # given keywords win; SAC's default is greedy too
    with Trainer(agent, "CartPole-v1", progress=False, eval_act_kwargs={}) as trainer:
        assert trainer.eval_act_kwargs == {}
    with Trainer(sac(GreedyTanhGaussianActor(hidden=8)), "Pendulum-v1", progress=False) as trainer:
        assert trainer.eval_act_kwargs == {"deterministic": True}


def test_a_sampler_plays_greedily_with_act_kwargs():
    actor = GreedyCategoricalActor(4, 2)
    agent = a2c_family(PPO, actor)
    stored = []
    agent.store_episode = stored.append
    envs = ParallelWrapperDummy([lambda _: gym.make("CartPole-v1") for _ in range(2)])
    try:
        sampler = VecSampler(
            agent, envs, act_method="act", act_kwargs={"deterministic": True}, seed=0
        )
        sampler.collect(episodes=2)
    finally:
        envs.close()
    assert actor.asked and all(actor.asked)
    for episode in stored:
        for step in episode:
            greedy = actor.net(step["state"]["state"]).argmax(dim=1, keepdim=True)
            assert torch.equal(step["action"]["action"].view(1, 1), greedy)


# -- 2. a gymnasium id as the environment -------------------------------------------------------
def make_dqn(**kwargs):
    torch.manual_seed(0)
    return DQN(
        QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kwargs
    )


def test_the_trainer_makes_a_gymnasium_id_for_training_evaluation_and_the_gif(tmp_path):
    trainer = Trainer(
        make_dqn(), "CartPole-v1", gif_env="CartPole-v1", log_dir=tmp_path, progress=False, seed=0
    )
    assert trainer.env.spec.id == "CartPole-v1" and trainer.eval_env.spec.id == "CartPole-v1"
    assert trainer.eval_env is not trainer.env  # made a second time, as a function would be
    assert trainer.gif_env.render_mode == "rgb_array"
    result = trainer.run(2)
    assert result.episodes == 2 and (tmp_path / "episode.gif").exists()
    trainer.close()
    assert trainer._owned == []


def test_an_unknown_gymnasium_id_is_named():
    with pytest.raises(ValueError, match="env 'NoSuchGame-v3': gymnasium cannot make"):
        Trainer(make_dqn(), "NoSuchGame-v3", progress=False)
    with pytest.raises(ValueError, match="eval_env 'NoSuchGame-v3'"):
        Trainer(make_dqn(), "CartPole-v1", eval_env="NoSuchGame-v3", progress=False)
    with pytest.raises(TypeError, match="a function making one or a gymnasium id, got int"):
        Trainer(make_dqn(), 3, progress=False)


# -- 3. a schedule that cannot advance ----------------------------------------------------------
def test_a_run_without_steps_warns_once_that_the_schedule_stays():
    dqn = make_dqn(epsilon=LinearSchedule(1.0, 0.05))
    trainer = Trainer(dqn, "CartPole-v1", eval_interval=0, progress=False, seed=0)
    with pytest.warns(UserWarning) as record:
        trainer.run(episodes=3)
    messages = [str(w.message) for w in record if "scheduled option" in str(w.message)]
    assert len(messages) == 1
    assert "['epsilon']" in messages[0] and "epsilon=1.0" in messages[0]
    assert "run(steps=N)" in messages[0]
    assert dqn.epsilon == 1.0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.run(episodes=2, steps=40)  # with a steps limit it moves, silently
    assert not [w for w in record if "scheduled option" in str(w.message)]
    assert dqn.epsilon < 1.0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        Trainer(make_dqn(), "CartPole-v1", eval_interval=0, progress=False).run(episodes=1)
    assert not [w for w in record if "scheduled option" in str(w.message)]  # nothing scheduled


# -- 4. progress in a file or a pipe ----------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_into_a_stream_that_is_no_terminal_is_plain_lines(capsys, tmp_path):
    Trainer(make_dqn(), "CartPole-v1", eval_interval=0, seed=0).run(3)
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.count("\n") == 1 and err.startswith("episode 3/3  steps ")  # only the last line
    assert "smoothed=" in err

    path = tmp_path / "train.log"
    with open(path, "w") as log:
        Trainer(
            make_dqn(),
            "CartPole-v1",
            eval_interval=2,
            eval_episodes=1,
            seed=0,
            loggers=[ProgressBar(stream=log, interval=0)],
        ).run(4)
    lines = path.read_text().splitlines()
    assert "\r" not in path.read_text()
    assert [line.split("  ")[0] for line in lines] == [f"episode {k}/4" for k in range(1, 5)]
    assert "best_eval=" not in lines[0] and "best_eval=" in lines[1]


def test_progress_on_a_terminal_is_a_tqdm_bar():
    terminal = Terminal()
    Trainer(
        make_dqn(), "CartPole-v1", eval_interval=0, seed=0, loggers=[ProgressBar(stream=terminal)]
    ).run(3)
    shown = terminal.getvalue()
    assert "\r" in shown and "3/3" in shown and "smoothed=" in shown


def test_the_progress_interval_is_checked():
    with pytest.raises(ValueError, match="interval must be a number >= 0 .*got -1"):
        ProgressBar(interval=-1)
