"""Packaging: the version, every documented import path, and the README's example program."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import machin

ROOT = Path(__file__).resolve().parents[1]

DOCUMENTED = {
    "machin.frame.algorithms": [
        "DQN",
        "DQNPer",
        "RAINBOW",
        "DDPG",
        "DDPGPer",
        "HDDPG",
        "TD3",
        "A2C",
        "PPO",
        "TRPO",
        "SAC",
        "TorchFramework",
        "A3C",
        "DQNApex",
        "DDPGApex",
        "IMPALA",
        "MADDPG",
    ],
    "machin.frame.algorithms.a3c": ["A3C"],
    "machin.frame.algorithms.apex": ["DQNApex", "DDPGApex"],
    "machin.frame.algorithms.impala": ["IMPALA", "EpisodeTransition", "EpisodeDistributedBuffer"],
    "machin.frame.algorithms.maddpg": ["MADDPG", "SHMBuffer"],
    "machin.frame.buffers.buffer_d": ["DistributedBuffer"],
    "machin.frame.buffers.prioritized_buffer_d": ["DistributedPrioritizedBuffer"],
    "machin.frame.helpers.servers": ["grad_server_helper", "model_server_helper"],
    "machin.parallel.distributed": [
        "World",
        "get_world",
        "get_cur_rank",
        "get_cur_name",
        "RpcGroup",
        "CollectiveGroup",
    ],
    "machin.parallel.server": [
        "OrderedServerBase",
        "OrderedServerSimple",
        "OrderedServerSimpleImpl",
        "PushPullGradServer",
        "PushPullGradServerImpl",
        "PushPullModelServer",
        "PushPullModelServerImpl",
    ],
    "machin.frame.algorithms.base": ["TorchFramework"],
    "machin.frame.algorithms.dqn": ["DQN"],
    "machin.frame.algorithms.dqn_per": ["DQNPer"],
    "machin.frame.algorithms.rainbow": ["RAINBOW"],
    "machin.frame.algorithms.ddpg": ["DDPG"],
    "machin.frame.algorithms.ddpg_per": ["DDPGPer"],
    "machin.frame.algorithms.hddpg": ["HDDPG"],
    "machin.frame.algorithms.td3": ["TD3"],
    "machin.frame.algorithms.a2c": ["A2C"],
    "machin.frame.algorithms.ppo": ["PPO"],
    "machin.frame.algorithms.trpo": ["TRPO"],
    "machin.frame.algorithms.sac": ["SAC"],
    "machin.frame.algorithms.utils": [
        "safe_call",
        "soft_update",
        "hard_update",
        "assert_output_is_probs",
    ],
    "machin.frame.buffers": ["Buffer", "PrioritizedBuffer", "WeightTree"],
    "machin.frame.buffers.buffer": ["Buffer"],
    "machin.frame.buffers.prioritized_buffer": ["PrioritizedBuffer", "WeightTree"],
    "machin.frame.transition": [
        "TransitionBase",
        "Transition",
        "TransitionStorageBasic",
        "TransitionStorageSmart",
    ],
    "machin.frame.noise.action_space_noise": [
        "add_uniform_noise_to_action",
        "add_normal_noise_to_action",
        "add_clipped_normal_noise_to_action",
        "add_ou_noise_to_action",
    ],
    "machin.frame.noise.generator": [
        "NoiseGen",
        "UniformNoiseGen",
        "NormalNoiseGen",
        "ClippedNormalNoiseGen",
        "OrnsteinUhlenbeckNoiseGen",
    ],
    "machin.frame.noise.param_space_noise": ["AdaptiveParamNoise", "perturb_model"],
    "machin.model.nets": [
        "NeuralNetworkModule",
        "ResNet",
        "static_module_wrapper",
        "dynamic_module_wrapper",
    ],
    "machin.env.utils.openai_gym": ["disable_view_window"],
    "machin.env.wrappers.base": ["ParallelWrapperBase"],
    "machin.env.wrappers.openai_gym": [
        "GymTerminationError",
        "ParallelWrapperDummy",
        "ParallelWrapperSubProc",
    ],
    "machin.parallel.pool": [
        "Pool",
        "P2PPool",
        "CtxPool",
        "CtxPoolStorage",
        "ThreadPool",
        "CtxThreadPool",
        "proxy_caller",
        "proxy_ctx_caller",
        "proxy_dumper",
    ],
    "machin.parallel.queue": ["SimpleQueue"],
    "machin.parallel.pickle": ["Pickler", "dumps", "mark_static_module"],
    "machin.parallel.assigner": ["ModelAssigner", "ModelSizeEstimator"],
    "machin.parallel.thread": ["Thread"],
    "machin.parallel.process": ["Process"],
    "machin.parallel.event": ["OrEvent", "AndEvent"],
    "machin.parallel.exception": ["ExceptionWithTraceback", "RemoteTraceback"],
    "machin.utils.checker": [
        "CheckError",
        "check_model",
        "check_nan",
        "check_shape",
        "i_chk_nan",
        "i_chk_range",
        "o_chk_nan",
        "o_chk_range",
        "p_chk_nan",
        "p_chk_range",
        "mark_as_atom_module",
        "mark_module_output",
    ],
    "machin.utils.conf": [
        "Config",
        "load_config_cmd",
        "load_config_file",
        "merge_config",
        "save_config",
    ],
    "machin.utils.helper_classes": ["Counter", "Object", "Switch", "Timer", "Trigger"],
    "machin.utils.learning_rate": ["gen_learning_rate_func"],
    "machin.utils.logging": ["default_logger", "FakeLogger"],
    "machin.utils.media": [
        "create_image",
        "create_image_subproc",
        "create_video",
        "create_video_subproc",
        "show_image",
        "numpy_array_to_pil_image",
    ],
    "machin.utils.prepare": [
        "prep_clear_dirs",
        "prep_create_dirs",
        "prep_load_model",
        "prep_load_state_dict",
    ],
    "machin.utils.save_env": ["SaveEnv"],
    "machin.utils.tensor_board": ["TensorBoard", "default_board"],
    "machin.utils.visualize": ["visualize_graph"],
}


def test_version_is_a_release_string():
    assert re.fullmatch(r"\d+\.\d+\.\d+", machin.__version__)


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_names_import(module):
    imported = importlib.import_module(module)
    missing = [name for name in DOCUMENTED[module] if not hasattr(imported, name)]
    assert not missing, f"{module} lacks {missing}"


def test_unknown_algorithm_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchAlgorithm"):
        importlib.import_module("machin.frame.algorithms").NoSuchAlgorithm  # noqa: B018


def test_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert isinstance(namespace["loss"], float)
    assert namespace["action"].shape == (1, 1)


def test_readme_example_prints_no_warning_on_a_fresh_interpreter(tmp_path):
    """A user who follows the README sees no warning: run its program verbatim in a new process."""
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "readme_program.py"
    script.write_text(code + "\nprint('done', loss)\n")
    result = subprocess.run(
        [sys.executable, "-W", "always", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("done ")
    assert "Warning" not in result.stderr, result.stderr
