"""Exact resume of a training run (``save_state`` / ``resume``) after the process is killed with SIGKILL.

Each algorithm trains for a few episodes of CartPole or Pendulum in a child process, saving
its state every ``SAVE_EVERY`` episodes. One run goes to the end; another is killed with
SIGKILL at a random step between two saves, and a fresh process builds the algorithm the
same way, resumes from the newest complete save and trains to the end. Both must end with
bit-identical networks. Then the bad inputs of ``resume``: each raises an error naming the
file and the mismatch, and leaves the algorithm as it was.
"""

import os
import random
import signal
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import A2C, DDPG, DQN, PPO, R2D1, RAINBOW, SAC, TD3, DQNPer
from machin.frame.algorithms.run_state import RunStateError

from ...multiprocess import no_children_left, run_ranks  # noqa: F401 (fixture)
from .nets import (
    Actor,
    CategoricalActor,
    Critic,
    DistQNet,
    GRUQNet,
    QCritic,
    QNet,
    TanhGaussianActor,
    ValueCritic,
)

pytestmark = pytest.mark.usefixtures("no_children_left")

EPISODES = 8
SAVE_EVERY = 2
MAX_STEPS = 25  # per episode
WARMUP = 16  # environment steps before the first update
EPISODE_SEED = 1000  # episode i resets its environment with seed EPISODE_SEED + i


@dataclass(frozen=True)
class Spec:
    build: Callable[[], Any]
    env: str
    hidden: Optional[int] = None  # size of the recurrent state (R2D1)
    store: Optional[str] = None  # "transition" or "episode"; None: as the algorithm's driver says


def _adam_mse(reduction: str = "mean"):
    return torch.optim.Adam, nn.MSELoss(reduction=reduction)


SPECS: Dict[str, Spec] = {
    "DQN": Spec(
        lambda: DQN(QNet(hidden=16), QNet(hidden=16), *_adam_mse(), batch_size=8, replay_size=60),
        "CartPole-v1",
    ),
    "DQNPer": Spec(
        lambda: DQNPer(
            QNet(hidden=16), QNet(hidden=16), *_adam_mse("none"), batch_size=8, replay_size=60
        ),
        "CartPole-v1",
    ),
    "RAINBOW": Spec(
        lambda: RAINBOW(
            DistQNet(atoms=5, hidden=16),
            DistQNet(atoms=5, hidden=16),
            torch.optim.Adam,
            0.0,
            20.0,
            batch_size=8,
            replay_size=60,
        ),
        "CartPole-v1",
        store="episode",
    ),  # its store_transition needs the n-step return ``value``
    "DDPG": Spec(
        lambda: DDPG(
            Actor(), Actor(), Critic(), Critic(), *_adam_mse(), batch_size=8, replay_size=60
        ),
        "Pendulum-v1",
    ),
    "TD3": Spec(
        lambda: TD3(
            Actor(),
            Actor(),
            Critic(),
            Critic(),
            Critic(),
            Critic(),
            *_adam_mse(),
            batch_size=8,
            replay_size=60,
        ),
        "Pendulum-v1",
    ),
    "SAC": Spec(
        lambda: SAC(
            TanhGaussianActor(hidden=16),
            *(QCritic(hidden=16) for _ in range(4)),
            *_adam_mse(),
            batch_size=8,
            replay_size=60,
        ),
        "Pendulum-v1",
    ),
    "PPO": Spec(
        lambda: PPO(
            CategoricalActor(hidden=16), ValueCritic(hidden=16), *_adam_mse(), batch_size=8
        ),
        "CartPole-v1",
    ),
    "A2C": Spec(
        lambda: A2C(
            CategoricalActor(hidden=16), ValueCritic(hidden=16), *_adam_mse(), batch_size=8
        ),
        "CartPole-v1",
    ),
    "R2D1": Spec(
        lambda: R2D1(
            GRUQNet(4, 2, 8),
            GRUQNet(4, 2, 8),
            *_adam_mse("none"),
            batch_size=4,
            sequence_length=3,
            burn_in=2,
            n_step=2,
            replay_size=200,
        ),
        "CartPole-v1",
        hidden=8,
    ),
}


def _build(name: str) -> Any:
    """The algorithm, built the same way in every process (seeded networks)."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    return SPECS[name].build()


def _to_env(action: torch.Tensor, discrete: bool) -> Any:
    return int(action.item()) if discrete else action.detach().reshape(-1).numpy()


def _episode(
    agent: Any, spec: Spec, env: gym.Env, index: int, steps: List[int], kill_at: Optional[int]
) -> None:
    """Play training episode ``index`` (storing and updating as the algorithm's driver says)."""
    driver, discrete = agent.driver, isinstance(env.action_space, gym.spaces.Discrete)
    store = spec.store or driver.store
    obs, _ = env.reset(seed=EPISODE_SEED + index)
    state = {"state": torch.tensor(obs, dtype=torch.float32).view(1, -1)}
    if spec.hidden:
        state["hidden"] = torch.zeros(1, spec.hidden)
    episode, done = [], False
    while not done:
        if steps[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        with torch.no_grad():
            output = getattr(agent, driver.act_method)(state, **dict(driver.act_kwargs))
        action = output[0] if isinstance(output, tuple) else output
        obs, reward, terminated, truncated, _ = env.step(_to_env(action, discrete))
        next_state = {"state": torch.tensor(obs, dtype=torch.float32).view(1, -1)}
        if spec.hidden:
            next_state["hidden"] = output[-1]
        step = {
            "state": state,
            "action": {"action": action},
            "next_state": next_state,
            "reward": float(reward),
            "terminal": bool(terminated),
        }
        steps[0] += 1
        done = terminated or truncated
        if store == "transition":
            agent.store_transition(step)
            if steps[0] >= WARMUP:
                agent.update()
        else:
            episode.append({**step, "truncated": truncated and not terminated})
        state = next_state
    if store == "episode":
        agent.store_episode(episode)
        if steps[0] >= WARMUP:
            agent.update()


def _train(
    rank: int, name: str, directory: str, kill_at: Optional[int], resume_from: Optional[str]
) -> Dict:
    """Train ``name`` to the end (from ``resume_from`` when given); the final networks and the save steps."""
    spec = SPECS[name]
    agent = _build(name)
    env = gym.make(spec.env, max_episode_steps=MAX_STEPS)
    first, steps, saved_at = 0, [0], []
    if resume_from is not None:
        agent.resume(resume_from)
        first = int(os.path.basename(resume_from).split("_")[1].split(".")[0])
        steps[0] = agent.__dict__.get("_test_steps", 0)
    for index in range(first, EPISODES):
        _episode(agent, spec, env, index, steps, kill_at)
        if (index + 1) % SAVE_EVERY == 0:
            agent.__dict__["_test_steps"] = steps[
                0
            ]  # the loop's own counter travels with the state
            agent.save_state(os.path.join(directory, f"state_{index + 1}.pt"))
            saved_at.append(steps[0])
    env.close()
    nets = {
        net: {k: v.clone() for k, v in getattr(agent, net).state_dict().items()}
        for net in agent._is_top
        if isinstance(getattr(agent, net, None), nn.Module)
    }
    return {"nets": nets, "saved_at": saved_at}


def _newest_complete(directory: str) -> str:
    """The newest state file whose manifest was written."""
    done = [
        f
        for f in os.listdir(directory)
        if f.endswith(".pt") and os.path.exists(os.path.join(directory, f) + ".manifest.json")
    ]
    return os.path.join(directory, max(done, key=lambda f: int(f.split("_")[1].split(".")[0])))


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(SPECS))
def test_resume_after_sigkill_is_bit_identical(name, tmp_path):
    full = run_ranks(_train, 1, args=(name, str(tmp_path / "full"), None, None), timeout=120)[0]
    saves = full["saved_at"]
    assert len(saves) == EPISODES // SAVE_EVERY
    rng = random.Random(name)
    gap = rng.randrange(len(saves) - 1)  # killed between save `gap` and the next one
    kill_at = rng.randint(saves[gap] + 1, saves[gap + 1] - 1)

    killed_dir = str(tmp_path / "killed")
    outcome = run_ranks(
        _train, 1, args=(name, killed_dir, kill_at, None), timeout=120, allow_exit=[0]
    )[0]
    assert getattr(outcome, "exitcode", None) == -signal.SIGKILL
    newest = _newest_complete(killed_dir)
    assert os.path.basename(newest) == f"state_{(gap + 1) * SAVE_EVERY}.pt"

    initial = _build(name)
    assert any(
        not torch.equal(value, getattr(initial, net).state_dict()[key])
        for net, params in full["nets"].items()
        for key, value in params.items()
    ), "nothing was trained"

    resumed = run_ranks(_train, 1, args=(name, killed_dir, None, newest), timeout=120)[0]
    assert resumed["nets"].keys() == full["nets"].keys()
    for net, params in full["nets"].items():
        for key, value in params.items():
            assert torch.equal(resumed["nets"][net][key], value), (
                f"{name}: {net}.{key} differs after resuming"
            )


# -- bad input ------------------------------------------------------------------------------
def _trained_dqn(hidden: int = 16, **options) -> DQN:
    torch.manual_seed(0)
    agent = DQN(QNet(hidden=hidden), QNet(hidden=hidden), *_adam_mse(), batch_size=4, **options)
    for i in range(12):
        agent.store_transition(
            {
                "state": {"state": torch.randn(1, 4)},
                "action": {"action": torch.tensor([[i % 2]])},
                "next_state": {"state": torch.randn(1, 4)},
                "reward": 1.0,
                "terminal": i == 11,
            }
        )
    agent.update()
    return agent


def _snapshot(agent: Any) -> Dict[str, Any]:
    """Everything of the agent a resume could change."""
    nets = {
        n: [p.clone() for p in getattr(agent, n).state_dict().values()]
        for n in ("qnet", "qnet_target")
    }
    buffer = agent.replay_buffer
    rows = buffer.sample_batch(
        buffer.size(), sample_method="all", sample_attrs=["state", "reward"]
    )[1]
    return {
        "nets": nets,
        "optim": repr(agent.qnet_optim.state_dict()),
        "counter": agent._update_counter,
        "rows": [r["state"].clone() if isinstance(r, dict) else r.clone() for r in rows],
        "size": buffer.size(),
    }


def _assert_unchanged(agent: Any, before: Dict[str, Any]) -> None:
    after = _snapshot(agent)
    for net, params in before["nets"].items():
        assert all(torch.equal(a, b) for a, b in zip(params, after["nets"][net])), f"{net} changed"
    assert after["optim"] == before["optim"] and after["counter"] == before["counter"]
    assert after["size"] == before["size"]
    assert all(torch.equal(a, b) for a, b in zip(before["rows"], after["rows"]))


@pytest.fixture
def saved(tmp_path):
    agent = _trained_dqn()
    path = str(tmp_path / "state.pt")
    agent.save_state(path)
    return path


def _running_agent() -> DQN:
    torch.manual_seed(5)
    agent = _trained_dqn()
    agent.update()  # differs from the saved state
    return agent


def test_resume_restores_what_was_saved(saved):
    agent = _running_agent()
    agent.resume(saved)
    expected = _trained_dqn()
    for net in ("qnet", "qnet_target"):
        for a, b in zip(getattr(agent, net).parameters(), getattr(expected, net).parameters()):
            assert torch.equal(a, b)
    assert agent._update_counter == expected._update_counter == 1


def test_truncated_file_is_refused(saved):
    with open(saved, "r+b") as file:
        file.truncate(os.path.getsize(saved) // 2)
    agent = _running_agent()
    before = _snapshot(agent)
    with pytest.raises(RunStateError, match=r"state\.pt.*truncated or was changed"):
        agent.resume(saved)
    _assert_unchanged(agent, before)


def test_tampered_file_is_refused(saved):
    with open(saved, "r+b") as file:
        file.seek(os.path.getsize(saved) // 2)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))
    agent = _running_agent()
    before = _snapshot(agent)
    with pytest.raises(RunStateError, match=r"state\.pt.*truncated or was changed"):
        agent.resume(saved)
    _assert_unchanged(agent, before)


def test_save_without_manifest_is_refused(saved):
    os.remove(saved + ".manifest.json")
    agent = _running_agent()
    with pytest.raises(RunStateError, match=r"state\.pt.*manifest .* is missing"):
        agent.resume(saved)


def test_state_of_another_algorithm_is_refused(tmp_path):
    torch.manual_seed(0)
    other = DQNPer(QNet(hidden=16), QNet(hidden=16), *_adam_mse("none"), batch_size=4)
    path = str(tmp_path / "per.pt")
    other.save_state(path)
    agent = _running_agent()
    before = _snapshot(agent)
    with pytest.raises(
        RunStateError,
        match=r"per\.pt.*state of a machin\.frame\.algorithms\.dqn_per\.DQNPer, "
        r"this algorithm is a machin\.frame\.algorithms\.dqn\.DQN",
    ):
        agent.resume(path)
    _assert_unchanged(agent, before)


def test_state_of_another_architecture_is_refused(tmp_path):
    path = str(tmp_path / "wide.pt")
    _trained_dqn(hidden=32).save_state(path)
    agent = _running_agent()
    before = _snapshot(agent)
    with pytest.raises(
        RunStateError,
        match=r"wide\.pt.*network 'qnet' has another architecture.*"
        r"net\.0\.weight: saved \[32, 4\] torch\.float32, here \[16, 4\]",
    ):
        agent.resume(path)
    _assert_unchanged(agent, before)


def test_buffer_with_other_columns_is_refused(tmp_path):
    torch.manual_seed(0)
    other = DQN(QNet(hidden=16), QNet(hidden=16), *_adam_mse(), batch_size=4)
    for _i in range(6):
        other.store_transition(
            {
                "state": {"state": torch.randn(1, 4)},
                "action": {"action": torch.tensor([[1]])},
                "next_state": {"state": torch.randn(1, 4)},
                "reward": 1.0,
                "terminal": False,
                "weight": 0.5,
            }
        )
    path = str(tmp_path / "columns.pt")
    other.save_state(path)
    agent = _running_agent()
    before = _snapshot(agent)
    with pytest.raises(
        RunStateError, match=r"columns\.pt.*buffer 'replay_buffer'.*other columns.*'weight'"
    ):
        agent.resume(path)
    _assert_unchanged(agent, before)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_schedulers_schedules_and_lazy_counters_come_back(tmp_path):
    def make():
        torch.manual_seed(0)
        return DQN(
            QNet(hidden=16),
            QNet(hidden=16),
            *_adam_mse(),
            batch_size=4,
            lr_scheduler=torch.optim.lr_scheduler.StepLR,
            lr_scheduler_args=((2, 0.5),),
        )

    agent = make()
    for _ in range(3):
        agent.update_lr_scheduler()
    agent.set_progress(0.25)
    path = str(tmp_path / "sched.pt")
    agent.save_state(path)
    lr = agent.qnet_optim.param_groups[0]["lr"]

    resumed = make()
    resumed.skipped_updates = 7  # a counter made after the save: it must go
    resumed.resume(path)
    assert resumed._lr_schedulers[0].last_epoch == 3
    assert resumed.qnet_optim.param_groups[0]["lr"] == lr == agent.learning_rate * 0.5
    assert resumed.__dict__["_progress"] == 0.25
    assert "skipped_updates" not in resumed.__dict__


def test_ou_noise_continues_where_it_was_saved(tmp_path, monkeypatch):
    from machin.frame.noise import action_space_noise

    monkeypatch.setattr(
        action_space_noise, "DEFAULT_OU_GEN", None
    )  # the shared generator is put back after
    monkeypatch.setattr(action_space_noise, "_shared_ou_kwargs", {})
    torch.manual_seed(0)
    agent = DDPG(Actor(), Actor(), Critic(), Critic(), *_adam_mse(), batch_size=4)
    state = {"state": torch.randn(1, 3)}

    def noisy():
        return agent.act_with_noise(state, noise_param={"sigma": 0.3}, mode="ou")

    for _ in range(3):
        noisy()
    path = str(tmp_path / "ou.pt")
    agent.save_state(path)
    expected = [noisy() for _ in range(3)]
    action_space_noise.DEFAULT_OU_GEN = None  # as in a fresh process
    agent.resume(path)
    assert all(torch.equal(a, b) for a, b in zip(expected, [noisy() for _ in range(3)]))
