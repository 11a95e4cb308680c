"""The trainer's callback protocol: events in order with their values, stopping, replaced parts."""

import gymnasium as gym
import pytest
import torch

from machin.frame.callbacks import (
    BestCheckpoint,
    Callback,
    CSVLogger,
    EpisodeEnd,
    EpisodeGif,
    Evaluation,
    Evaluator,
    LearningCurve,
    ProgressBar,
    TensorBoardLogger,
    run_directories,
)
from machin.frame.trainer import Trainer
from machin.utils.save_env import SaveEnv
from tests.frame.test_trainer import CountingDQN, QNet, cartpole, make_dqn, read_csv

pytestmark = pytest.mark.filterwarnings("ignore:.*CartPole-v0")


class Recorder(Callback):
    """Records every event with what it received, and stops where told to."""

    def __init__(self, stop_at_step=None, stop_at_episode=None, stop_at_evaluation=None):
        self.events = []
        self.stop_at_step = stop_at_step
        self.stop_at_episode = stop_at_episode
        self.stop_at_evaluation = stop_at_evaluation

    def on_training_start(self, trainer):
        self.events.append(("start", trainer.result.episodes, trainer.steps))

    def on_step(self, trainer, transitions):
        self.events.append(("step", trainer.steps, transitions))
        return False if trainer.steps == self.stop_at_step else None

    def on_episode_end(self, trainer, episode):
        self.events.append(("episode", episode))
        return False if episode.episode == self.stop_at_episode else None

    def on_evaluation(self, trainer, evaluation):
        self.events.append(("evaluation", evaluation))
        stop = len(trainer.result.eval_returns) == self.stop_at_evaluation
        return False if stop else "go on"  # anything but False lets the run go on

    def on_training_end(self, trainer, completed):
        self.events.append(("end", completed))

    def of(self, kind):
        return [event[1] for event in self.events if event[0] == kind]


def test_a_callback_sees_every_event_in_order_with_the_values_of_the_run():
    recorder = Recorder()
    returns = iter([10.0, 30.0, 20.0])
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=2,
        warmup_steps=40,
        seed=0,
        progress=False,
        callbacks=[recorder],
    )
    trainer.evaluate = lambda: next(returns)
    result = trainer.run(6)
    kinds = [event[0] for event in recorder.events]
    assert kinds[0] == "start" and recorder.events[0][1:] == (0, 0) and kinds[-1] == "end"
    assert recorder.events[-1] == ("end", True)
    # one on_step per training step, counting the steps one by one
    assert recorder.of("step") == list(range(1, result.steps + 1))
    episodes = recorder.of("episode")
    assert [e.episode for e in episodes] == [1, 2, 3, 4, 5, 6]
    assert [e.episode_return for e in episodes] == result.returns
    ends = [int(sum(result.returns[: i + 1])) for i in range(6)]  # CartPole: one reward per step
    assert [e.steps for e in episodes] == ends
    smoothed = result.returns[0]
    for i, episode in enumerate(episodes):
        smoothed = smoothed if i == 0 else 0.9 * smoothed + 0.1 * result.returns[i]
        assert episode.smoothed == pytest.approx(smoothed)
    # the losses are the means of DQN's update results, present once updates began
    assert (
        result.returns[0] < 40 and not episodes[0].losses and set(episodes[-1].losses) == {"loss"}
    )
    # every evaluation comes right before the end of the episode it follows
    evaluations = recorder.of("evaluation")
    assert evaluations == [
        Evaluation(10.0, 2, ends[1], 2, False, True),
        Evaluation(30.0, 4, ends[3], 4, False, True),
        Evaluation(20.0, 6, ends[5], 6, False, False),
    ]
    order = [(e[0], e[1].episode) for e in recorder.events if e[0] in ("episode", "evaluation")]
    assert order == [
        ("episode", 1),
        ("evaluation", 2),
        ("episode", 2),
        ("episode", 3),
        ("evaluation", 4),
        ("episode", 4),
        ("episode", 5),
        ("evaluation", 6),
        ("episode", 6),
    ]
    assert (
        result.eval_returns == [(2, 10.0), (4, 30.0), (6, 20.0)] and result.best_eval_return == 30.0
    )


def test_step_evaluations_reach_the_callbacks_with_the_step_as_version():
    recorder = Recorder()
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_every_steps=20,
        eval_episodes=1,
        seed=0,
        progress=False,
        callbacks=[recorder],
    )
    trainer.evaluate = lambda: float(trainer.steps)
    result = trainer.run(steps=60)
    evaluations = recorder.of("evaluation")
    multiples = list(
        range(20, result.steps + 1, 20)
    )  # the run ends with the episode that reaches 60
    assert [(e.steps, e.version, e.by_steps, e.mean_return) for e in evaluations] == [
        (step, step, True, float(step)) for step in multiples
    ] and len(multiples) >= 3
    # on a separate evaluation environment it runs at the step that reached the multiple: the evaluator
    # comes first, so the user's callback gets the evaluation before that step's on_step
    assert [e for e in recorder.events if e[0] in ("step", "evaluation")][18:21] == [
        ("step", 19, 1),
        ("evaluation", evaluations[0]),
        ("step", 20, 1),
    ]
    assert result.eval_steps == multiples


@pytest.mark.parametrize(
    "stop, expected_episodes",
    [
        ({"stop_at_episode": 3}, 3),
        ({"stop_at_evaluation": 2}, 4),  # evaluations after episodes 2 and 4
    ],
)
def test_returning_false_ends_the_run_after_the_episode(stop, expected_episodes):
    recorder = Recorder(**stop)
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=2,
        eval_episodes=1,
        seed=0,
        progress=False,
        callbacks=[recorder],
    )
    result = trainer.run(10)
    assert result.episodes == expected_episodes and len(recorder.of("episode")) == expected_episodes
    assert recorder.events[-1] == ("end", True)


def test_a_stop_asked_in_a_step_lets_the_episode_finish():
    recorder = Recorder(stop_at_step=5)
    dqn = CountingDQN(QNet(hidden=8), QNet(hidden=8), torch.optim.Adam, torch.nn.MSELoss())
    result = Trainer(
        dqn, cartpole, eval_interval=0, seed=0, progress=False, callbacks=[recorder]
    ).run(10)
    assert (
        result.episodes == 1 and result.steps == int(result.returns[0]) > 5
    )  # the episode was not cut
    assert dqn.replay_buffer.size() == result.steps


def test_a_replaced_evaluator_is_used_by_the_run_and_by_evaluate():
    class Constant(Evaluator):
        def __init__(self):
            super().__init__(interval=3)
            self.asked = []

        def evaluate(self, trainer, episodes):
            self.asked.append(episodes)
            return 7.0

    evaluator = Constant()
    trainer = Trainer(
        make_dqn(), cartpole, eval_episodes=2, seed=0, progress=False, evaluator=evaluator
    )
    assert (
        trainer.evaluator is evaluator and trainer.eval_interval == 10
    )  # the option stays what it was
    result = trainer.run(6)
    assert result.eval_returns == [(3, 7.0), (6, 7.0)] and evaluator.asked == [2, 2]
    assert trainer.evaluate(4) == 7.0 and evaluator.asked[-1] == 4


def test_replaced_loggers_are_used_instead_of_the_files(tmp_path, capsys):
    class Rows(Callback):
        def __init__(self):
            self.rows, self.closed = [], None

        def on_episode_end(self, trainer, episode):
            self.rows.append((episode.episode, episode.episode_return))

        def on_training_end(self, trainer, completed):
            self.closed = completed

    rows = Rows()
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=2,
        eval_episodes=1,
        log_dir=tmp_path,
        seed=0,
        loggers=[rows],
    )
    result = trainer.run(4)
    assert rows.rows == list(enumerate(result.returns, start=1)) and rows.closed is True
    # no CSV, scalars, curve or progress bar; the checkpointer still saves the best networks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]
    assert result.best_version is not None and "csv" not in result.paths
    assert "episode" not in capsys.readouterr().err


def test_the_checkpointer_can_be_replaced_or_removed(tmp_path):
    class Versions(Callback):
        def __init__(self):
            self.versions = []

        def on_evaluation(self, trainer, evaluation):
            self.versions.append((evaluation.version, evaluation.improved))

    returns = iter([1.0, 3.0, 2.0])
    versions = Versions()
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=1,
        log_dir=tmp_path,
        tensorboard=False,
        seed=0,
        progress=False,
        checkpointer=versions,
    )
    trainer.evaluate = lambda: next(returns)
    result = trainer.run(3)
    assert versions.versions == [(1, True), (2, True), (3, False)]
    assert result.best_version is None and not (tmp_path / "checkpoints").exists()
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=1,
        eval_episodes=1,
        log_dir=tmp_path / "none",
        tensorboard=False,
        seed=0,
        progress=False,
    )
    assert isinstance(trainer.checkpointer, BestCheckpoint)
    trainer.checkpointer = None
    result = trainer.run(2)
    assert result.best_version is None and len(result.eval_returns) == 2
    assert not (tmp_path / "none" / "checkpoints").exists()


def test_every_part_ends_even_when_the_run_fails(tmp_path):
    class Failing(Callback):
        def on_episode_end(self, trainer, episode):
            if episode.episode == 2:
                raise RuntimeError("failed at episode 2")

    recorder = Recorder()
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=0,
        log_dir=tmp_path,
        seed=0,
        progress=False,
        callbacks=[Failing(), recorder],
    )
    with pytest.raises(RuntimeError, match="failed at episode 2"):
        trainer.run(5)
    assert recorder.events[-1] == ("end", False)
    assert len(read_csv(tmp_path / "progress.csv")) == 2  # written, flushed and closed
    assert (tmp_path / "learning_curve.png").exists()  # drawn from the episodes played


def test_the_default_parts_follow_the_options(tmp_path):
    trainer = Trainer(
        make_dqn(), cartpole, log_dir=tmp_path, gif_env=lambda: cartpole(render_mode="rgb_array")
    )
    assert [type(part) for part in trainer.loggers] == [
        CSVLogger,
        TensorBoardLogger,
        ProgressBar,
        LearningCurve,
        EpisodeGif,
    ]
    assert isinstance(trainer.evaluator, Evaluator) and trainer.evaluator.interval == 10
    assert trainer.checkpointer.directory == str(tmp_path / "checkpoints")
    trainer.close()
    trainer = Trainer(make_dqn(), cartpole, tensorboard=False, progress=False, eval_every_steps=100)
    assert trainer.loggers == [] and trainer.checkpointer is None and trainer.callbacks == []
    assert (trainer.evaluator.interval, trainer.evaluator.every_steps) == (0, 100)
    save_env = SaveEnv(tmp_path / "runs")
    assert run_directories(save_env) == {
        "log": save_env.get_trial_train_log_dir(),
        "tensorboard": save_env.get_trial_train_log_dir(),
        "checkpoints": save_env.get_trial_model_dir(),
        "images": save_env.get_trial_image_dir(),
    }


def test_the_base_callback_does_nothing_and_lets_the_run_go_on():
    callback = Callback()
    trainer = Trainer(
        make_dqn(),
        cartpole,
        eval_interval=1,
        eval_episodes=1,
        seed=0,
        progress=False,
        callbacks=[callback],
    )
    result = trainer.run(3)
    assert result.episodes == 3 and len(result.eval_returns) == 3
    assert callback.on_step(trainer, 1) is None
    assert callback.on_episode_end(trainer, EpisodeEnd(1, 1, 1.0, 1.0)) is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"callbacks": [object()]},
            r"callbacks must hold Callback objects, got <object object .*> \(object\)",
        ),
        (
            {"callbacks": Callback()},
            "callbacks must be a list of Callback objects or None, got Callback",
        ),
        ({"loggers": ["csv"]}, r"loggers must hold Callback objects, got 'csv' \(str\)"),
        ({"evaluator": Callback()}, "evaluator must be an Evaluator .* got Callback"),
        ({"checkpointer": "best"}, "checkpointer must be a Callback or None, got str"),
    ],
)
def test_parts_that_are_not_callbacks_are_refused(kwargs, message):
    with pytest.raises(TypeError, match=message):
        Trainer(make_dqn(), cartpole, **kwargs)


def test_a_group_reports_its_steps_by_group_step():
    from machin.env.wrappers import ParallelWrapperDummy

    recorder = Recorder()
    with ParallelWrapperDummy([lambda i: gym.make("CartPole-v0")] * 3) as envs:
        result = Trainer(
            make_dqn(), envs, eval_interval=0, seed=0, progress=False, callbacks=[recorder]
        ).run(steps=30)
    steps = [event for event in recorder.events if event[0] == "step"]
    assert (
        steps[:3] == [("step", 3, 3), ("step", 6, 3), ("step", 9, 3)]
        and steps[-1][1] == result.steps
    )
