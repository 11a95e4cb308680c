"""Exact resume of a :class:`~machin.frame.trainer.Trainer` run (``save_every``, ``run(resume=True)``).

A child process trains through the trainer, saving every ``SAVE_EVERY`` steps. One run goes
to the end; another kills itself with SIGKILL from a callback at a random step between two
saves, in the middle of an episode, and a fresh process resumes it and trains to the end.
Both must end with bit-identical networks, the same returns and evaluation history, the
same CSV rows and the same TensorBoard scalars (none written twice). The same on groups of
environments (a gymnasium ``SyncVectorEnv`` and a ``ParallelWrapperDummy``). Then SIGTERM /
SIGINT, a resume without a save, and bad or foreign saves.
"""

import csv
import json
import os
import random
import shutil
import signal
import struct
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import gymnasium as gym
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tensorboardX.proto import event_pb2
from torch import nn

from machin.env.wrappers.openai_gym import ParallelWrapperDummy
from machin.frame.algorithms import DDPG, DQN, PPO, DQNPer
from machin.frame.callbacks import Callback
from machin.frame.run_checkpoint import RunCheckpoint, RunCheckpointError
from machin.frame.trainer import Trainer

from ..multiprocess import no_children_left, run_ranks  # noqa: F401 (fixture)
from .algorithms.nets import Actor, CategoricalActor, Critic, QNet, ValueCritic

pytestmark = pytest.mark.usefixtures("no_children_left")

STEPS = 120
SAVE_EVERY = 30
MAX_STEPS = 25  # per episode
SEED = 100


def _adam_mse(reduction: str = "mean"):
    return torch.optim.Adam, nn.MSELoss(reduction=reduction)


BUILDS: Dict[str, Callable[[], Any]] = {
    "DQN": lambda: DQN(
        QNet(hidden=16), QNet(hidden=16), *_adam_mse(), batch_size=8, replay_size=60
    ),
    "PPO": lambda: PPO(
        CategoricalActor(hidden=16), ValueCritic(hidden=16), *_adam_mse(), batch_size=8
    ),
    "DDPG": lambda: DDPG(
        Actor(), Actor(), Critic(), Critic(), *_adam_mse(), batch_size=8, replay_size=60
    ),
}
BUILDS["PPO-rollouts"] = BUILDS["PPO"]
ENVS = {
    "DQN": "CartPole-v1",
    "PPO": "CartPole-v1",
    "PPO-rollouts": "CartPole-v1",
    "DDPG": "Pendulum-v1",
}
OPTIONS = {
    "PPO-rollouts": {"rollout_steps": 16, "warmup_steps": 0}
}  # rollouts cross episodes and saves


class _KillAt(Callback):
    """Kills its own process with SIGKILL (or sends it another signal) when the run reaches ``step``."""

    def __init__(self, step: Optional[int], signum: int = signal.SIGKILL) -> None:
        self.step, self.signum = step, signum

    def on_step(self, trainer, transitions):
        if trainer.steps == self.step:
            os.kill(os.getpid(), self.signum)


def _build(name: str) -> Any:
    torch.manual_seed(0)
    return BUILDS[name]()


def _trainer(
    name: str,
    agent: Any,
    directory: str,
    kill_at: Optional[int] = None,
    signum: int = signal.SIGKILL,
    **options,
) -> Trainer:
    options = {
        "save_every": SAVE_EVERY,
        "warmup_steps": 16,
        "callbacks": [_KillAt(kill_at, signum)],
        **OPTIONS.get(name, {}),
        **options,
    }
    return Trainer(
        agent,
        lambda: gym.make(ENVS[name], max_episode_steps=MAX_STEPS),
        seed=SEED,
        log_dir=directory,
        progress=False,
        eval_interval=2,
        eval_episodes=1,
        **options,
    )


def _nets(agent: Any) -> Dict[str, Dict[str, torch.Tensor]]:
    return {
        net: {k: v.clone() for k, v in getattr(agent, net).state_dict().items()}
        for net in agent._is_top
        if isinstance(getattr(agent, net, None), nn.Module)
    }


def _train(
    rank: int, name: str, directory: str, kill_at: Optional[int], resume: bool
) -> Dict[str, Any]:
    """Train ``name`` for ``STEPS`` steps through a trainer; what the run produced."""
    agent = _build(name)
    with _trainer(name, agent, directory, kill_at) as trainer:
        result = trainer.run(steps=STEPS, resume=resume)
    return {
        "nets": _nets(agent),
        "returns": result.returns,
        "eval_returns": result.eval_returns,
        "steps": result.steps,
        "episodes": result.episodes,
        "resumed_from": trainer.resumed_from,
    }


def _csv_rows(directory: str):
    with open(os.path.join(directory, "progress.csv")) as handle:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(handle)]


def _scalars(directory: str) -> Dict[str, list]:
    """``{tag: [(step, value), ...]}`` from every TensorBoard event file in ``directory``."""
    scalars: Dict[str, list] = {}
    for path in Path(directory).glob("events.out.tfevents.*"):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 16 + length
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return {tag: sorted(values) for tag, values in scalars.items()}


def _assert_same_nets(mine, expected, name):
    assert mine.keys() == expected.keys()
    for net, params in expected.items():
        for key, value in params.items():
            assert torch.equal(mine[net][key], value), f"{name}: {net}.{key} differs after resuming"


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(BUILDS))
def test_resume_after_sigkill_is_bit_identical(name, tmp_path):
    full_dir, killed_dir = str(tmp_path / "full"), str(tmp_path / "killed")
    full = run_ranks(_train, 1, args=(name, full_dir, None, False), timeout=120)[0]
    assert full["steps"] >= STEPS and full["eval_returns"]
    rng = random.Random(name)
    gap = rng.randrange(1, STEPS // SAVE_EVERY - 1)  # killed after save `gap`, before the next one
    kill_at = rng.randint(gap * SAVE_EVERY + 1, (gap + 1) * SAVE_EVERY - 1)

    outcome = run_ranks(
        _train, 1, args=(name, killed_dir, kill_at, False), timeout=120, allow_exit=[0]
    )[0]
    assert getattr(outcome, "exitcode", None) == -signal.SIGKILL
    saves = sorted(os.listdir(os.path.join(killed_dir, "saves")))
    assert f"steps_{gap * SAVE_EVERY}" in saves and f"steps_{(gap + 1) * SAVE_EVERY}" not in saves

    assert any(
        not torch.equal(value, getattr(_build(name), net).state_dict()[key])
        for net, params in full["nets"].items()
        for key, value in params.items()
    ), "nothing was trained"
    resumed = run_ranks(_train, 1, args=(name, killed_dir, None, True), timeout=120)[0]
    assert resumed["resumed_from"].endswith(f"steps_{gap * SAVE_EVERY}")
    _assert_same_nets(resumed["nets"], full["nets"], name)
    for key in ("returns", "eval_returns", "steps", "episodes"):
        assert resumed[key] == full[key], key
    rows = _csv_rows(killed_dir)
    assert [int(row["episode"]) for row in rows] == list(
        range(1, full["episodes"] + 1)
    )  # no duplicate, no gap
    assert rows == _csv_rows(full_dir)
    scalars = _scalars(os.path.join(killed_dir, "tensorboard"))
    assert scalars == _scalars(os.path.join(full_dir, "tensorboard"))
    for tag, values in scalars.items():
        assert len({step for step, _ in values}) == len(values), f"{tag} has a step written twice"


# -- groups of environments -------------------------------------------------------------------------
GROUP_STEPS = 200


def _cartpole(*_: Any) -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)


GROUPS: Dict[str, Any] = {  # case: (algorithm, group maker, trainer options)
    "PPO-rollouts-SyncVectorEnv": (
        "PPO",
        lambda: SyncVectorEnv([_cartpole] * 3),
        {"rollout_steps": 16, "warmup_steps": 0},
    ),
    "PPO-rollouts-ParallelWrapperDummy": (
        "PPO",
        lambda: ParallelWrapperDummy([_cartpole] * 3),
        {"rollout_steps": 16, "warmup_steps": 0},
    ),
    "DQN-SyncVectorEnv-DISABLED": (
        "DQN",
        lambda: SyncVectorEnv([_cartpole] * 2, autoreset_mode=AutoresetMode.DISABLED),
        {},
    ),
}


class _KillAfter(Callback):
    """Kills its own process with SIGKILL at the first step that reaches ``step`` (a group's steps jump)."""

    def __init__(self, step: Optional[int]) -> None:
        self.step = step

    def on_step(self, trainer, transitions):
        if self.step is not None and trainer.steps >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def _group_trainer(
    case: str, agent: Any, group: Any, directory: str, kill_at: Optional[int] = None
) -> Trainer:
    _, _, options = GROUPS[case]
    options = {"warmup_steps": 16, **options}
    return Trainer(
        agent,
        group,
        eval_env=_cartpole,
        seed=SEED,
        log_dir=directory,
        progress=False,
        eval_interval=2,
        eval_episodes=1,
        save_every=SAVE_EVERY,
        callbacks=[_KillAfter(kill_at)],
        **options,
    )


def _train_group(
    rank: int, case: str, directory: str, kill_at: Optional[int], resume: bool
) -> Dict[str, Any]:
    """Train on the group of ``case`` for ``GROUP_STEPS`` steps; what the run produced."""
    name, make_group, _ = GROUPS[case]
    agent, group = _build(name), make_group()
    try:
        trainer = _group_trainer(case, agent, group, directory, kill_at)
        result = trainer.run(steps=GROUP_STEPS, resume=resume)
    finally:
        group.close()
    return {
        "nets": _nets(agent),
        "returns": result.returns,
        "eval_returns": result.eval_returns,
        "steps": result.steps,
        "episodes": result.episodes,
        "resumed_from": trainer.resumed_from,
    }


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", list(GROUPS))
def test_resume_on_a_group_after_sigkill_is_bit_identical(case, tmp_path):
    full_dir, killed_dir = str(tmp_path / "full"), str(tmp_path / "killed")
    full = run_ranks(_train_group, 1, args=(case, full_dir, None, False), timeout=120)[0]
    assert full["steps"] >= GROUP_STEPS and full["eval_returns"]
    kill_at = random.Random(case).randint(2 * SAVE_EVERY, GROUP_STEPS - SAVE_EVERY)

    outcome = run_ranks(
        _train_group, 1, args=(case, killed_dir, kill_at, False), timeout=120, allow_exit=[0]
    )[0]
    assert getattr(outcome, "exitcode", None) == -signal.SIGKILL
    newest = _newest(killed_dir)  # the kill comes before the save of its step: the newest is older
    assert SAVE_EVERY <= int(newest.split("_")[-1]) < kill_at

    name = GROUPS[case][0]
    assert any(
        not torch.equal(value, getattr(_build(name), net).state_dict()[key])
        for net, params in full["nets"].items()
        for key, value in params.items()
    ), "nothing was trained"
    resumed = run_ranks(_train_group, 1, args=(case, killed_dir, None, True), timeout=120)[0]
    assert resumed["resumed_from"] == newest
    _assert_same_nets(resumed["nets"], full["nets"], case)
    for key in ("returns", "eval_returns", "steps", "episodes"):
        assert resumed[key] == full[key], key
    assert _csv_rows(killed_dir) == _csv_rows(full_dir)
    assert _scalars(os.path.join(killed_dir, "tensorboard")) == _scalars(
        os.path.join(full_dir, "tensorboard")
    )


def test_a_group_that_cannot_be_replayed_is_refused(tmp_path):
    group = SyncVectorEnv([_cartpole] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        with pytest.raises(
            ValueError,
            match=r"save_every=30 saves runs for an exact resume, which this trainer "
            r"cannot: it trains on a group of environments that cannot be saved: "
            r"its autoreset mode is SAME_STEP",
        ):
            Trainer(
                _build("PPO"),
                group,
                eval_env=_cartpole,
                seed=SEED,
                log_dir=str(tmp_path),
                save_every=SAVE_EVERY,
                progress=False,
            )
    finally:
        group.close()


def test_a_group_that_does_not_replay_is_refused(tmp_path):
    case, directory = "PPO-rollouts-ParallelWrapperDummy", str(tmp_path)
    with ParallelWrapperDummy([_cartpole] * 3) as group:
        _group_trainer(case, _build("PPO"), group, directory).run(steps=40)
    shutil.rmtree(_newest(directory))  # keep the save at step 30, inside a rollout

    def shifted(*_):  # another environment: its observations differ from the saved ones
        env = _cartpole()
        return gym.wrappers.TransformObservation(env, lambda obs: obs + 1.0, env.observation_space)

    agent = _build("PPO")
    before = _nets(agent)
    with (
        ParallelWrapperDummy([shifted] * 3) as group,
        pytest.raises(
            RunCheckpointError,
            match=r"steps_30.*environment 0: replaying its episode in progress \(reset .*, "
            r"then its \d+ actions\) did not lead to the saved observation",
        ),
    ):
        _group_trainer(case, agent, group, directory).run(steps=GROUP_STEPS, resume=True)
    _assert_same_nets(_nets(agent), before, "PPO")


# -- in one process: signals, resume without a save, bad saves -----------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_stops_and_the_run_resumes_exactly(signum, tmp_path):
    expected_agent = _build("DQN")
    with _trainer("DQN", expected_agent, str(tmp_path / "full")) as trainer:
        expected = trainer.run(steps=STEPS)

    before = signal.getsignal(signum)
    agent = _build("DQN")
    directory = str(tmp_path / "stopped")
    with _trainer("DQN", agent, directory, kill_at=47, signum=signum) as trainer:
        stopped = trainer.run(steps=STEPS)
    assert stopped.interrupted and stopped.steps == 47
    assert signal.getsignal(signum) is before  # the trainer's handler is gone
    assert trainer.run_checkpoint.newest() == os.path.join(directory, "saves", "steps_47")
    assert [int(row["steps"]) for row in _csv_rows(directory)][-1] < 47

    agent = _build("DQN")
    with _trainer("DQN", agent, directory) as trainer:
        resumed = trainer.run(steps=STEPS, resume=True)
    assert trainer.resumed_from == os.path.join(directory, "saves", "steps_47")
    assert not resumed.interrupted
    assert (resumed.returns, resumed.eval_returns, resumed.steps) == (
        expected.returns,
        expected.eval_returns,
        expected.steps,
    )
    _assert_same_nets(_nets(agent), _nets(expected_agent), "DQN")
    assert _csv_rows(directory) == _csv_rows(str(tmp_path / "full"))


def test_resume_without_a_save_starts_afresh(tmp_path):
    agent = _build("DQN")
    with _trainer("DQN", agent, str(tmp_path / "a"), save_every=1000) as trainer:
        fresh = trainer.run(steps=60)
    agent = _build("DQN")
    with _trainer("DQN", agent, str(tmp_path / "b"), save_every=1000) as trainer:
        resumed = trainer.run(steps=60, resume=True)
        assert trainer.resumed_from is None
    assert resumed.returns == fresh.returns
    assert os.listdir(tmp_path / "b" / "saves") == [f"steps_{resumed.steps}"]  # the save at the end


def test_saves_keep_the_newest(tmp_path):
    agent = _build("DQN")
    keeper = RunCheckpoint(tmp_path / "saves", every=20, keep=2)
    trainer = Trainer(
        agent,
        gym.make("CartPole-v1", max_episode_steps=MAX_STEPS),
        seed=SEED,
        progress=False,
        eval_interval=0,
        callbacks=[keeper],
    )
    result = trainer.run(steps=100)
    expected = (
        ["steps_80", "steps_100"] if result.steps == 100 else ["steps_100", f"steps_{result.steps}"]
    )
    assert sorted(os.listdir(tmp_path / "saves"), key=lambda n: int(n.split("_")[1])) == expected


def test_resume_needs_a_run_checkpoint(tmp_path):
    trainer = Trainer(
        _build("DQN"), gym.make("CartPole-v1"), seed=SEED, progress=False, eval_interval=0
    )
    with pytest.raises(
        ValueError,
        match=r"run\(resume=True\) resumes from the saves of a RunCheckpoint: give "
        r"save_every .* got 0 RunCheckpoint parts",
    ):
        trainer.run(steps=10, resume=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seed": None}, r"save_every=5 .* it has no seed"),
        (
            {"log_dir": None},
            r"save_every=5 saves into <log_dir>/saves: give log_dir, got log_dir=None",
        ),
        ({"save_every": 0}, r"save_every must be an integer >= 1, got 0"),
    ],
)
def test_save_every_options_are_checked(tmp_path, options, message):
    kwargs = {"seed": SEED, "log_dir": str(tmp_path), "save_every": 5, **options}
    with pytest.raises(ValueError, match=message):
        Trainer(_build("DQN"), gym.make("CartPole-v1"), progress=False, **kwargs)


@pytest.fixture
def saved_run(tmp_path):
    """A DQN run of 40 steps saved at step 30 (and at its end); the directory of the step-30 save."""
    directory = str(tmp_path / "run")
    with _trainer("DQN", _build("DQN"), directory) as trainer:
        trainer.run(steps=40)
    return directory, os.path.join(directory, "saves", "steps_30")


def _resume_fails(name: str, directory: str, message: str, agent: Any = None, **options) -> None:
    """``run(resume=True)`` raises ``RunCheckpointError`` matching ``message`` and changes no network."""
    agent = agent if agent is not None else _build(name)
    before = _nets(agent)
    with (
        _trainer(name, agent, directory, **options) as trainer,
        pytest.raises(RunCheckpointError, match=message),
    ):
        trainer.run(steps=STEPS, resume=True)
    _assert_same_nets(_nets(agent), before, name)


def _newest(directory: str) -> str:
    saves = os.path.join(directory, "saves")
    return os.path.join(saves, max(os.listdir(saves), key=lambda n: int(n.split("_")[1])))


def test_tampered_trainer_state_is_refused(saved_run):
    directory, _ = saved_run
    path = os.path.join(_newest(directory), "trainer.pt")
    with open(path, "r+b") as file:
        file.seek(os.path.getsize(path) // 2)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))
    _resume_fails("DQN", directory, r"steps_\d+.*trainer\.pt.* is truncated or was changed")


def test_save_of_another_algorithm_is_refused(saved_run):
    directory, _ = saved_run
    torch.manual_seed(0)
    per = DQNPer(QNet(hidden=16), QNet(hidden=16), *_adam_mse("none"), batch_size=8, replay_size=60)
    _resume_fails(
        "DQN",
        directory,
        r"steps_\d+.*it is a run of a machin\.frame\.algorithms\.dqn\.DQN, this "
        r"trainer trains a machin\.frame\.algorithms\.dqn_per\.DQNPer",
        agent=per,
    )


def test_save_made_with_other_options_is_refused(saved_run):
    directory, _ = saved_run
    os.rename(_newest(directory), os.path.join(directory, "saves", "other"))  # resume from steps_30
    trainer = Trainer(
        _build("DQN"),
        gym.make("CartPole-v1", max_episode_steps=MAX_STEPS),
        seed=SEED,
        log_dir=directory,
        progress=False,
        eval_interval=2,
        eval_episodes=1,
        save_every=SAVE_EVERY,
        callbacks=[_KillAt(None)],
    )
    with pytest.raises(
        RunCheckpointError,
        match=r"steps_30.*saved with warmup_steps=16, this trainer has "
        r"warmup_steps=0",
    ):
        trainer.run(steps=STEPS, resume=True)


def test_foreign_manifest_is_refused(saved_run):
    directory, _ = saved_run
    with open(os.path.join(_newest(directory), "manifest.json"), "w") as file:
        json.dump({"format": 1, "kind": "something else"}, file)
    _resume_fails(
        "DQN", directory, r"manifest\.json' is not the manifest of a trainer save of format 1"
    )


def test_incomplete_save_is_skipped(saved_run):
    directory, save_30 = saved_run
    newest = _newest(directory)
    os.remove(os.path.join(newest, "manifest.json"))  # as if killed while saving
    agent = _build("DQN")
    with _trainer("DQN", agent, directory) as trainer:
        trainer.run(steps=STEPS, resume=True)
    assert trainer.resumed_from == save_30


def test_resume_from_an_older_save_drops_the_logs_written_after_it(saved_run, tmp_path):
    directory, save_30 = saved_run
    shutil.rmtree(
        _newest(directory)
    )  # the run went on to step 40 and wrote rows and scalars after step 30
    assert _newest(directory) == save_30
    with _trainer("DQN", _build("DQN"), directory) as trainer:
        trainer.run(steps=STEPS, resume=True)
    full_dir = str(tmp_path / "full")
    with _trainer("DQN", _build("DQN"), full_dir) as trainer:
        trainer.run(steps=STEPS)
    assert _csv_rows(directory) == _csv_rows(full_dir)
    scalars = _scalars(os.path.join(directory, "tensorboard"))
    assert scalars == _scalars(os.path.join(full_dir, "tensorboard"))
    assert len(scalars["train/return"]) == len({step for step, _ in scalars["train/return"]}) > 2


def test_a_run_outside_the_main_thread_saves_without_signal_handlers(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    outcome = {}

    def train():
        with _trainer("DQN", _build("DQN"), str(tmp_path)) as trainer:
            outcome["result"] = trainer.run(steps=35)
            outcome["newest"] = trainer.run_checkpoint.newest()

    thread = threading.Thread(target=train)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and "result" in outcome, "the run failed in its thread"
    assert outcome["newest"] == os.path.join(
        str(tmp_path), "saves", f"steps_{outcome['result'].steps}"
    )
    assert os.path.isdir(os.path.join(str(tmp_path), "saves", "steps_30"))
    assert signal.getsignal(signal.SIGTERM) is before


class _SignalTwice(Callback):
    def on_step(self, trainer, transitions):
        if trainer.steps == 20:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_second_signal_goes_to_the_handler_installed_before(tmp_path):
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with _trainer("DQN", _build("DQN"), str(tmp_path), callbacks=[_SignalTwice()]) as trainer:
            result = trainer.run(steps=STEPS)
        assert received == [signal.SIGTERM]
        assert result.interrupted and result.steps == 20
        assert trainer.run_checkpoint.newest().endswith("steps_20")
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_episode_that_does_not_replay_is_refused(saved_run):
    directory, _ = saved_run
    shutil.rmtree(_newest(directory))  # the save at the end of the run is between two episodes

    def shifted():  # another environment: its observations differ from the saved ones
        env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
        return gym.wrappers.TransformObservation(env, lambda obs: obs + 1.0, env.observation_space)

    trainer = Trainer(
        _build("DQN"),
        shifted,
        seed=SEED,
        log_dir=directory,
        progress=False,
        warmup_steps=16,
        eval_interval=2,
        eval_episodes=1,
        save_every=SAVE_EVERY,
        callbacks=[_KillAt(None)],
    )
    with (
        trainer,
        pytest.raises(
            RunCheckpointError,
            match=r"steps_30.*replaying the episode in progress \(reset "
            r"with seed \d+, then its \d+ actions\) did not lead to "
            r"the saved observation",
        ),
    ):
        trainer.run(steps=STEPS, resume=True)


def test_a_run_checkpoint_needs_a_seed(tmp_path):
    trainer = Trainer(
        _build("DQN"),
        gym.make("CartPole-v1"),
        progress=False,
        eval_interval=0,
        callbacks=[RunCheckpoint(tmp_path, every=10)],
    )
    with pytest.raises(
        ValueError,
        match=r"a run of this trainer cannot be saved for an exact resume: it has no seed",
    ):
        trainer.run(steps=20)
    assert not os.listdir(tmp_path)
