"""python -m machin.auto export: the exported policy, run in its own runtime, acts as machin does."""

import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.auto import config as auto_config
from machin.auto import export as exporting
from machin.auto import launcher
from machin.auto.__main__ import main
from machin.frame.algorithms.config import ConfigError

# The torchscript format is torch.jit's, which torch deprecates (exported-program is the
# successor); the warning is torch's, not the test's concern.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"
)

#: algorithm -> environment; PPO's Gaussian actor on Pendulum gives means outside the box,
#: which the exported policy clips as the trainer does.
RUNS = {
    "DQN": "CartPole-v1",
    "RAINBOW": "CartPole-v1",
    "TD3": "Pendulum-v1",
    "SAC": "Pendulum-v1",
    "PPO": "Pendulum-v1",
}
#: An ONNX export takes seconds (torch builds its table of ONNX functions at every call):
#: the discrete greedy action and the continuous deterministic one, clipped, cover its ops.
CASES = [
    (algo, fmt)
    for algo in sorted(RUNS)
    for fmt in exporting.FORMATS
    if fmt != "onnx" or algo in ("DQN", "PPO")
]


def write_run(run_dir, algo, env):
    """A run directory as ``train`` leaves it, without the training: ``config.json`` and
    ``final/`` with networks moved away from those the config's seed builds."""
    config = auto_config.generate(algo, env, max_steps=100, seed=5)
    for kwargs in config["frame_config"]["model_kwargs"]:
        kwargs["hidden"] = 16
    framework = launcher.build_framework(config)
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name in framework._is_top:
            for parameter in getattr(framework, name).parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator))
    run_dir.mkdir()
    auto_config.save(config, str(run_dir / launcher.CONFIG_FILE))
    framework.save(str(run_dir / launcher.FINAL_DIR))
    return str(run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {algo: write_run(root / algo, algo, env) for algo, env in RUNS.items()}


def observations(env_id, size=64):
    space = gym.make(env_id).observation_space
    generator = torch.Generator().manual_seed(3)
    return 3 * torch.randn((size, *space.shape), generator=generator)


def machin_actions(run_dir, states):
    """The greedy actions of the run's algorithm in machin, before and after the trainer's
    conversion to the environment's units (clipped to a ``Box``)."""
    config, framework = launcher.load_run(run_dir)
    state = {"state": states}
    if config["frame"] in ("DQN", "RAINBOW"):
        output = framework.act_discrete(state)
    elif config["frame"] == "TD3":
        output = framework.act(state)
    else:
        output = framework.act(state, deterministic=True)
    raw = output[0] if isinstance(output, tuple) else output
    space = gym.make(config["env"]).action_space
    if isinstance(space, gym.spaces.Box):
        return raw, torch.from_numpy(np.clip(raw.numpy(), space.low, space.high))
    return raw, raw


def run_exported(path, fmt, states):
    if fmt == "torchscript":
        return torch.jit.load(path)(states)
    if fmt == "exported-program":
        return torch.export.load(path).module()(states)
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["observation"]
    (action,) = session.run(["action"], {"observation": states.numpy()})
    return torch.from_numpy(action)


@pytest.mark.parametrize("algo, fmt", CASES)
def test_the_exported_policy_acts_as_machin(runs, algo, fmt, tmp_path):
    path = exporting.export_policy(runs[algo], fmt, str(tmp_path / exporting.DEFAULT_FILES[fmt]))
    states = observations(RUNS[algo])
    raw, expected = machin_actions(runs[algo], states)
    for batch in (states, states[:1]):  # the batch size is free, 1 included
        action = run_exported(path, fmt, batch)
        assert action.shape == expected[: len(batch)].shape and action.dtype == expected.dtype
        if expected.dtype == torch.int64:
            assert torch.equal(action, expected[: len(batch)])
        else:
            torch.testing.assert_close(action, expected[: len(batch)], rtol=1e-5, atol=1e-5)
    if algo in ("DQN", "RAINBOW"):  # the test covers more than one action
        assert len(expected.unique()) == 2
    if algo == "PPO":  # and actions the clipping changes
        assert not torch.equal(raw, expected)


def test_default_path_and_the_command_line(runs, tmp_path, capsys):
    path = exporting.export_policy(runs["DQN"], "torchscript")
    assert path == f"{runs['DQN']}/policy.torchscript.pt"
    assert torch.jit.load(path)(observations("CartPole-v1")).shape == (64, 1)
    target = tmp_path / "deploy" / "td3.pt2"
    assert main(["export", runs["TD3"], "--format", "exported-program", "-o", str(target)]) == 0
    assert capsys.readouterr().out == f"wrote {target}\n"
    assert torch.export.load(str(target)).module()(observations("Pendulum-v1")).shape == (64, 1)


def test_an_unknown_format_is_refused(runs, capsys):
    with pytest.raises(
        ConfigError,
        match=r"--format: one of \['onnx', 'torchscript', 'exported-program'\], got 'tflite'",
    ):
        exporting.export_policy(runs["DQN"], "tflite")
    assert main(["export", runs["DQN"], "--format", "tflite"]) == 2
    assert capsys.readouterr().err.startswith("error: --format: one of")


def test_a_run_directory_without_saved_networks_is_refused(runs, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"holds no config.json"):
        exporting.export_policy(str(tmp_path), "onnx")
    config = auto_config.load(f"{runs['SAC']}/config.json")
    auto_config.save(config, str(tmp_path / "config.json"))
    with pytest.raises(
        ConfigError, match=rf"RUN_DIR: {str(tmp_path)!r} has no saved networks: no folder 'final'"
    ):
        exporting.export_policy(str(tmp_path), "torchscript")
    (tmp_path / "final").mkdir()
    with pytest.raises(ConfigError, match=r"RUN_DIR: the networks in .*final' do not load"):
        exporting.export_policy(str(tmp_path), "torchscript")
    assert main(["export", runs["SAC"], "--format", "onnx", "--best"]) == 2
    assert "has no saved networks: no folder 'checkpoints'" in capsys.readouterr().err


def test_a_missing_package_names_the_extra(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # importing it now fails
    with pytest.raises(
        exporting.MissingPackageError,
        match=r"--format onnx needs the package 'onnxscript'.*pip install machin\[export\]",
    ) as caught:
        exporting.export_policy(runs["DQN"], "onnx")
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, ConfigError)


class SamplingActor(nn.Module):
    """An actor that can only sample: its forward has no ``deterministic`` argument."""

    def forward(self, state):
        return state[:, :1], state[:, :1]


def test_an_actor_without_deterministic_is_refused(runs):
    config, framework = launcher.load_run(runs["SAC"])
    framework.actor = SamplingActor()
    space = gym.make("Pendulum-v1").action_space
    with pytest.raises(
        ConfigError, match=r"export of SAC .* SamplingActor.forward has no 'deterministic'"
    ):
        exporting.greedy_policy(framework, config, space, torch.zeros(2, 3))


def test_greedy_policy_shifts_discrete_actions_and_clips_box_ones():
    qnet = nn.Linear(2, 3)  # its forward argument is `input`
    shifted = exporting.GreedyPolicy(
        qnet, "input", "argmax", action_space=gym.spaces.Discrete(3, start=-1)
    )
    states = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(shifted(states), qnet(states).argmax(dim=1, keepdim=True) - 1)
    box = gym.spaces.Box(np.float32([-1.0, 0.0]), np.float32([1.0, 0.5]))
    clipped = exporting.GreedyPolicy(nn.Identity(), "input", action_space=box)
    actions = clipped(torch.tensor([[-3.0, 0.2], [0.5, 2.0]]))
    assert torch.equal(actions, torch.tensor([[-1.0, 0.2], [0.5, 0.5]]))
