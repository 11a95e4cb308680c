"""Loading Minari datasets, episode dicts and saved machin experience into buffers, whole or not at all."""

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import TD3, RunStateError
from machin.frame.buffers import Buffer
from machin.frame.offline import (
    DatasetError,
    load_episodes,
    load_experience,
    load_minari,
    save_experience,
)
from tests.frame.algorithms.nets import Actor, Critic

from .expert import expert_action, record_dataset

BOX3 = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
TORQUE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def columns(buffer):
    _, (state, action, reward, next_state, terminal) = buffer.sample_batch(
        0,
        sample_method="all",
        sample_attrs=["state", "action", "reward", "next_state", "terminal"],
    )
    return state["state"], action["action"], reward, next_state["state"], terminal


def episode(length=4, obs_dim=3, start=0.0, **overrides):
    """An episode dict whose observation ``t`` holds ``start + t`` in every feature."""
    observations = (start + np.arange(length + 1, dtype=np.float32))[:, None].repeat(obs_dim, 1)
    data = {
        "observations": observations,
        "actions": np.full((length, 1), 0.5, dtype=np.float32),
        "rewards": -np.arange(length, dtype=np.float64),
        "terminations": np.eye(1, length, length - 1, dtype=bool)[0],
        "truncations": np.zeros(length, dtype=bool),
    }
    data.update(overrides)
    return data


def load(episodes, buffer=None, observation_space=BOX3, action_space=TORQUE, **kwargs):
    return load_episodes(
        episodes,
        buffer,
        dataset="toy",
        observation_space=observation_space,
        action_space=action_space,
        **kwargs,
    )


@pytest.fixture
def recorded(minari_path):
    """Three Pendulum episodes of 20 steps (truncated) of the scripted expert."""
    return record_dataset("pendulum/test-v0", episodes=3, seed=5, max_episode_steps=20)


# -- Minari ------------------------------------------------------------------------------------
def test_every_step_of_a_minari_dataset_becomes_one_transition(recorded):
    buffer = load_minari(recorded)
    state, action, reward, next_state, terminal = columns(buffer)
    episodes = list(recorded.iterate_episodes())
    assert buffer.size() == buffer.buffer_size == 60 == recorded.total_steps
    observations = np.concatenate([e.observations[:-1] for e in episodes])
    assert np.array_equal(state.numpy(), observations) and state.dtype == torch.float32
    assert np.array_equal(
        next_state.numpy(), np.concatenate([e.observations[1:] for e in episodes])
    )
    assert np.array_equal(action.numpy(), np.concatenate([e.actions for e in episodes]))
    assert np.allclose(reward.view(-1).numpy(), np.concatenate([e.rewards for e in episodes]))
    assert not terminal.any()  # Pendulum only truncates: every value is bootstrapped
    assert np.allclose(action[:5].numpy(), np.stack([expert_action(o) for o in observations[:5]]))


def test_a_dataset_id_is_read_from_minari_datasets_path_with_the_given_keys(recorded):
    buffer = load_minari("pendulum/test-v0", state_key="obs", action_key="torque")
    assert buffer.size() == 60
    assert set(buffer[0].state) == {"obs"} and set(buffer[0].action) == {"torque"}


def test_a_dataset_is_appended_after_the_transitions_a_buffer_holds(recorded):
    buffer = load_minari(recorded, Buffer(200))
    load_minari(recorded, buffer)
    state = columns(buffer)[0]
    assert buffer.size() == 120 and torch.equal(state[:60], state[60:])


def test_spaces_other_than_the_datasets_are_refused(recorded):
    with pytest.raises(
        DatasetError,
        match=r"dataset 'pendulum/test-v0' was recorded with the "
        r"observation space Box\(.*\), but observation_space=Box\(.*\(4,\).*was given",
    ):
        load_minari(recorded, observation_space=gym.spaces.Box(-1, 1, (4,)))
    with pytest.raises(DatasetError, match="action space"):
        load_minari(recorded, action_space=gym.spaces.Discrete(3))


def test_a_buffer_without_room_is_refused_before_anything_is_read(recorded):
    buffer = Buffer(70)
    buffer.extend_columns(
        {
            "state": {"state": torch.zeros(20, 3)},
            "action": {"action": torch.zeros(20, 1)},
            "next_state": {"state": torch.zeros(20, 3)},
            "reward": torch.zeros(20),
            "terminal": torch.zeros(20, dtype=torch.bool),
        }
    )
    with pytest.raises(
        DatasetError,
        match=r"dataset 'pendulum/test-v0' does not fit: it has 60 "
        r"more transitions, the buffer \(buffer_size=70\) holds 20 and has room for 50",
    ):
        load_minari(recorded, buffer)
    assert buffer.size() == 20


def _tamper(minari_path, change):
    path = minari_path / "pendulum" / "test-v0" / "data" / "main_data.hdf5"
    with h5py.File(path, "r+") as file:
        change(file)


def test_a_nan_in_a_stored_episode_names_it_and_loads_nothing(recorded, minari_path):
    def poison(file):
        file["episode_1"]["observations"][7, 2] = np.nan

    _tamper(minari_path, poison)
    buffer = Buffer(500)
    buffer.extend_columns(
        {
            "state": {"state": torch.ones(2, 3)},
            "action": {"action": torch.ones(2, 1)},
            "next_state": {"state": torch.ones(2, 3)},
            "reward": torch.ones(2),
            "terminal": torch.zeros(2, dtype=torch.bool),
        }
    )
    with pytest.raises(
        DatasetError,
        match=r"dataset 'pendulum/test-v0', episode 1, key "
        r"'observations': step 7 holds a NaN or infinite value",
    ):
        load_minari("pendulum/test-v0", buffer)
    assert buffer.size() == 2 and torch.equal(columns(buffer)[0], torch.ones(2, 3))
    # (episode 0 was written before episode 1 failed: the undo removed it)


def test_a_missing_key_names_the_episode_and_the_key(recorded, minari_path):
    _tamper(minari_path, lambda file: file["episode_2"].__delitem__("rewards"))
    buffer = Buffer(100)
    with pytest.raises(
        DatasetError, match=r"dataset 'pendulum/test-v0', episode 2: key 'rewards' is missing"
    ):
        load_minari("pendulum/test-v0", buffer)
    assert buffer.size() == 0 and buffer.attribute_names is None


# -- episode dicts -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad, message",
    [
        ({"rewards": None}, r"dataset 'toy', episode 1: key 'rewards' is missing"),
        (
            {"actions": np.zeros((0, 1), np.float32), "rewards": np.zeros(0)},
            r"dataset 'toy', episode 1: key 'actions' is empty \(an episode of length 0\)",
        ),
        (
            {"observations": np.zeros((5, 4), np.float32)},
            r"dataset 'toy', episode 1, key 'observations': expected 5 rows of shape \[3\] for the "
            r"observation space Box\(.*\), got an array of shape \[5, 4\] and dtype float32",
        ),
        (
            {"observations": np.zeros((4, 3), np.float32)},
            r"key 'observations': expected 5 rows of shape \[3\]",
        ),
        (
            {"rewards": np.array([0.0, np.inf, 0.0, 0.0])},
            r"episode 1, key 'rewards': step 1 holds a NaN or infinite value",
        ),
        (
            {"actions": np.array([[0.1], [0.2], [np.nan], [0.4]], np.float32)},
            r"episode 1, key 'actions': step 2 holds a NaN or infinite value",
        ),
        (
            {"terminations": np.array([0, 0, 3, 0])},
            r"episode 1, key 'terminations': step 2 holds 3, not a 0/1 flag",
        ),
        (
            {"truncations": np.zeros(3, bool)},
            r"episode 1, key 'truncations': expected 4 flags, got an array of shape \[3\]",
        ),
        (
            {"actions": np.array(["a", "b", "c", "d"])},
            r"key 'actions': expected 4 rows of shape \[1\] for the action space",
        ),
    ],
)
def test_bad_episodes_are_refused_naming_dataset_episode_and_key_and_nothing_is_loaded(
    bad, message
):
    buffer = Buffer(100)
    with pytest.raises(DatasetError, match=message):
        load([episode(), {**episode(), **bad}], buffer)
    assert buffer.size() == 0 and buffer.attribute_names is None


def test_episodes_name_themselves_with_an_id():
    with pytest.raises(DatasetError, match="dataset 'toy', episode walk-7: key 'actions' is empty"):
        load([{**episode(), "id": "walk-7", "actions": np.zeros((0, 1)), "rewards": np.zeros(0)}])


def test_discrete_actions_become_indices_counted_from_the_spaces_start():
    space = gym.spaces.Discrete(3, start=-1)
    buffer = load([episode(3, actions=np.array([-1, 1, 0]))], action_space=space)
    action = columns(buffer)[1]
    assert action.dtype == torch.int64 and action.view(-1).tolist() == [0, 2, 1]
    with pytest.raises(
        DatasetError,
        match=r"key 'actions': step 1 holds 2, which is not in the action space Discrete\(3, start=-1\)",
    ):
        load([episode(3, actions=np.array([0, 2, 0]))], action_space=space)


def test_multi_binary_observations_become_floats_and_other_spaces_are_refused():
    space = gym.spaces.MultiBinary(3)
    buffer = load(
        [episode(2, observations=np.array([[0, 1, 1], [1, 0, 0], [1, 1, 1]], np.int8))],
        observation_space=space,
    )
    assert columns(buffer)[0].tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    with pytest.raises(
        DatasetError, match=r"dataset 'toy': its observation space Dict\(.*\) is not supported"
    ):
        load([episode()], observation_space=gym.spaces.Dict({"a": BOX3}))


def test_the_total_is_checked_and_allocated_at_once():
    with pytest.raises(DatasetError, match="does not fit: it has 8 more transitions"):
        load([episode(), episode()], Buffer(6), total_steps=8)
    buffer = load([episode(), episode(start=10.0)], total_steps=8)
    assert buffer.buffer_size == 8 and buffer._capacity == 8
    assert columns(buffer)[0][:, 0].tolist() == [0, 1, 2, 3, 10, 11, 12, 13]


def test_a_buffer_of_another_layout_refuses_the_dataset_naming_the_episode():
    buffer = Buffer(100)
    buffer.extend_columns(
        {
            "state": {"state": torch.zeros(1, 5)},
            "action": {"action": torch.zeros(1, 1)},
            "next_state": {"state": torch.zeros(1, 5)},
            "reward": torch.zeros(1),
            "terminal": torch.zeros(1, dtype=torch.bool),
        }
    )
    with pytest.raises(
        DatasetError,
        match=r"dataset 'toy', episode 0: the buffer refused it: attribute "
        r"state\['state'\] must be a tensor of 4 rows of shape \[5\]",
    ):
        load([episode()], buffer)
    assert buffer.size() == 1


# -- machin experience -------------------------------------------------------------------------
def rows(first, count):
    """``count`` transitions whose state rows hold ``first, first + 1, ...``."""
    values = torch.arange(float(first), float(first + count))
    return {
        "state": {"state": values.view(-1, 1).repeat(1, 3)},
        "action": {"action": torch.zeros(count, 1)},
        "next_state": {"state": (values + 1).view(-1, 1).repeat(1, 3)},
        "reward": values,
        "terminal": torch.zeros(count, dtype=torch.bool),
    }


def test_saved_experience_loads_back_oldest_first_even_after_the_ring_wrapped(tmp_path):
    source = Buffer(6)
    source.extend_columns(rows(0, 4))
    source.extend_columns(rows(4, 4))
    assert source._pos == 2  # wrapped: rows 2..7 are held, the oldest at storage row 2
    save_experience(source, tmp_path / "experience.pt")
    loaded = load_experience(tmp_path / "experience.pt")
    assert loaded.size() == 6 and columns(loaded)[0][:, 0].tolist() == [2, 3, 4, 5, 6, 7]
    assert columns(loaded)[2].view(-1).tolist() == [2, 3, 4, 5, 6, 7]
    small = Buffer(8)
    small.extend_columns(rows(100, 3))
    with pytest.raises(DatasetError, match="has room for 5"):
        load_experience(tmp_path / "experience.pt", small)
    assert small.size() == 3


def test_the_replay_buffer_of_a_saved_run_is_reused(tmp_path):
    torch.manual_seed(0)
    td3 = TD3(
        Actor(), Actor(), Critic(), Critic(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss()
    )
    load([episode(5)], td3.replay_buffer)
    td3.save_state(str(tmp_path / "run.pt"))
    reused = load_experience(tmp_path / "run.pt", Buffer(50))
    assert torch.equal(columns(reused)[0], columns(td3.replay_buffer)[0])
    with pytest.raises(
        DatasetError,
        match=r"the run state holds no buffer 'memory' \(it holds \['replay_buffer'\]\)",
    ):
        load_experience(tmp_path / "run.pt", buffer_name="memory")
    (tmp_path / "run.pt").write_bytes((tmp_path / "run.pt").read_bytes()[:-10])
    with pytest.raises(RunStateError, match="truncated or was changed"):
        load_experience(tmp_path / "run.pt")
