"""The trained policy of a run directory, alone, for deployment (``python -m machin.auto export``).

The exported policy is a function of one input, ``observation``, a batch ``[B, *shape]`` of
observations as the trainer feeds them (a float tensor of torch's default dtype), to one
output, ``action``, the action the agent takes greedily, in the environment's units:

* DQN, DQNPer: the argmax of the Q network, ``[B, 1]`` int64; RAINBOW: the argmax of the
  expected value of its distributions;
* DDPG, DDPGPer, HDDPG, TD3: the actor's action;
* SAC, A2C, PPO, TRPO: the actor's action called with ``deterministic=True`` (the mean of a
  Gaussian policy, squashed for SAC; the most probable action of a categorical one).

As the trainer does before stepping the environment, an action of a ``Box`` space is clipped
to its bounds and one of a ``Discrete`` space is shifted by the space's ``start``. The batch
size is free in every format.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Dict, Optional, Tuple

import gymnasium as gym
import torch
from torch import nn

from machin.frame.algorithms.config import ConfigError
from machin.frame.algorithms.utils import forward_takes
from machin.utils.torch_internals import distribution_checks_off

from . import config as auto_config
from . import launcher

FORMATS = ("onnx", "torchscript", "exported-program")
#: File written into the run directory when no path is given, per format.
DEFAULT_FILES = {
    "onnx": "policy.onnx",
    "torchscript": "policy.torchscript.pt",
    "exported-program": "policy.pt2",
}
INPUT_NAME = "observation"
OUTPUT_NAME = "action"

Q_NETWORK_ALGORITHMS = auto_config.DISCRETE_ONLY
DETERMINISTIC_ACTOR_ALGORITHMS = ("DDPG", "DDPGPer", "HDDPG", "TD3")
STOCHASTIC_ACTOR_ALGORITHMS = ("SAC",) + auto_config.BOTH_SPACES


class MissingPackageError(ConfigError, ImportError):
    """An optional package that an export format needs is not installed."""


class GreedyPolicy(nn.Module):
    """Observation in, greedy action out, around one network of a trained algorithm.

    Args:
        network: The Q network or the actor (the module is shared, not copied).
        state_key: The ``forward`` argument of ``network`` that receives the observation.
        greedy: ``"argmax"`` (Q values ``[B, action_num]``: the best action), ``"expected"``
            (value distributions ``[B, action_num, atoms]`` over ``support``: the action of
            the best expected value) or ``"output"`` (the network's first output as is).
        call_kwargs: Keyword arguments added to every call of ``network``.
        support: The values of the atoms, for ``"expected"``.
        action_space: Clip the actions into it (``Box``) or shift them by its start
            (``Discrete``); ``None``: return them unchanged.
    """

    def __init__(
        self,
        network: nn.Module,
        state_key: str = "state",
        greedy: str = "output",
        call_kwargs: Optional[Dict[str, Any]] = None,
        support: Optional[torch.Tensor] = None,
        action_space: Optional[gym.Space] = None,
    ):
        super().__init__()
        if greedy not in ("argmax", "expected", "output"):
            raise ValueError(f"greedy must be 'argmax', 'expected' or 'output', got {greedy!r}")
        self.network = network
        self.state_key, self.greedy = state_key, greedy
        self.call_kwargs = dict(call_kwargs or {})
        self.register_buffer("support", support)
        self.clip = isinstance(action_space, gym.spaces.Box)
        self.start = int(action_space.start) if isinstance(action_space, gym.spaces.Discrete) else 0
        if self.clip:
            dtype = torch.get_default_dtype()
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=dtype)[None])
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=dtype)[None])

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """The greedy action for a batch of observations.

        Args:
            observation: Observations ``[B, *shape]``, as the environment gives them, batched.
        """
        output = self.network(**{self.state_key: observation}, **self.call_kwargs)
        action = output[0] if isinstance(output, (tuple, list)) else output
        if self.greedy == "argmax":
            action = action.argmax(dim=1, keepdim=True)
        elif self.greedy == "expected":
            action = (action * self.support).sum(dim=-1).argmax(dim=1, keepdim=True)
        if self.clip:
            action = torch.maximum(torch.minimum(action, self.high), self.low)
        elif self.start:
            action = action + self.start
        return action


def _spaces(config: Dict[str, Any]) -> Tuple[gym.Space, gym.Space]:
    """The observation and action spaces of the config's environment."""
    env = auto_config.env_maker(config)()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _check_deterministic(network: nn.Module, frame: str) -> None:
    """Refuse an actor whose ``forward`` cannot be called with ``deterministic=True``."""
    if not forward_takes(network, "deterministic"):
        raise ConfigError(
            f"export of {frame} calls the actor with deterministic=True for its greedy action, "
            f"but {type(network).__name__}.forward has no 'deterministic' argument"
        )


def greedy_policy(
    framework: Any, config: Dict[str, Any], action_space: gym.Space, example: torch.Tensor
) -> GreedyPolicy:
    """The greedy policy of ``framework``, built from the launcher config ``config``.

    Args:
        framework: The algorithm, with its trained networks.
        config: Its launcher config (the algorithm's name, ``trainer_config.state_key``).
        action_space: The environment's action space.
        example: A batch of observations (RAINBOW's atoms are counted on it).

    Raises:
        ConfigError: For an algorithm ``export`` does not support, or a stochastic actor
            without a ``deterministic`` argument.
    """
    frame = config["frame"]
    state_key = auto_config.trainer_options(config).get("state_key", "state")
    if frame in Q_NETWORK_ALGORITHMS:
        network = framework.qnet
        greedy = "expected" if frame == "RAINBOW" else "argmax"
        call_kwargs = {}
    elif frame in DETERMINISTIC_ACTOR_ALGORITHMS + STOCHASTIC_ACTOR_ALGORITHMS:
        network, greedy, call_kwargs = framework.actor, "output", {}
        if frame in STOCHASTIC_ACTOR_ALGORITHMS:
            _check_deterministic(network, frame)
            call_kwargs = {"deterministic": True}
    else:
        raise ConfigError(f"frame: export supports {list(auto_config.SUPPORTED)}, got {frame!r}")
    support = None
    if greedy == "expected":
        with torch.no_grad():
            dist = GreedyPolicy(network, state_key)(example)
        support = framework._support(dist)
    policy = GreedyPolicy(network, state_key, greedy, call_kwargs, support, action_space)
    return policy.eval().requires_grad_(False)


def _example(observation_space: gym.Space, env_id: str) -> torch.Tensor:
    """A batch of two observations of ``observation_space``, as the trainer makes them."""
    if observation_space.shape is None:
        raise ConfigError(
            f"env: export needs an observation space of arrays, {env_id!r} has {observation_space}"
        )
    return torch.zeros((2, *observation_space.shape), dtype=torch.get_default_dtype())


def _require(fmt: str, *modules: str) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise MissingPackageError(
                f"--format {fmt} needs the package {name!r}, which is not installed "
                f"(pip install machin[export])"
            ) from error


def _exported_program(policy: GreedyPolicy, example: torch.Tensor) -> Any:
    batch = torch.export.Dim("batch")
    with distribution_checks_off():  # their checks branch on values
        return torch.export.export(policy, (example,), dynamic_shapes={INPUT_NAME: {0: batch}})


def _write_torchscript(policy: GreedyPolicy, example: torch.Tensor, path: str) -> None:
    with distribution_checks_off():  # their checks branch on values
        traced = torch.jit.trace(policy, (example,))
    torch.jit.save(traced, path)


def _write_exported_program(policy: GreedyPolicy, example: torch.Tensor, path: str) -> None:
    torch.export.save(_exported_program(policy, example), path)


def _write_onnx(policy: GreedyPolicy, example: torch.Tensor, path: str) -> None:
    torch.onnx.export(
        _exported_program(policy, example),
        (example,),
        path,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        external_data=False,
        verbose=False,
    )


_WRITERS: Dict[str, Callable[[GreedyPolicy, torch.Tensor, str], None]] = {
    "onnx": _write_onnx,
    "torchscript": _write_torchscript,
    "exported-program": _write_exported_program,
}


def export_policy(
    run_dir: str, fmt: str, path: Optional[str] = None, checkpoint: str = launcher.FINAL_DIR
) -> str:
    """Write the greedy policy of a run directory to a file (see the module's description).

    Args:
        run_dir: A directory written by :func:`machin.auto.launcher.train`.
        fmt: ``"onnx"`` (needs ``onnx`` and ``onnxscript``; run it with ``onnxruntime``),
            ``"torchscript"`` (read back with ``torch.jit.load``) or ``"exported-program"``
            (``torch.export.save``; read back with ``torch.export.load``).
        path: The file to write; default: :data:`DEFAULT_FILES` in ``run_dir``.
        checkpoint: ``"final"`` or ``"checkpoints"`` (the best evaluated networks).

    Returns:
        The path written.

    Raises:
        ConfigError: For an unknown format, a directory without a config or saved networks,
            or an algorithm ``export`` does not support.
        MissingPackageError: When a package the format needs is missing (a
            :class:`ConfigError` and an ``ImportError``).
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format: one of {list(FORMATS)}, got {fmt!r}")
    if fmt == "onnx":
        _require(fmt, "onnx", "onnxscript")
    config, framework = launcher.load_run(run_dir, checkpoint)
    observation_space, action_space = _spaces(config)
    example = _example(observation_space, config["env"])
    policy = greedy_policy(framework, config, action_space, example)
    path = path or os.path.join(run_dir, DEFAULT_FILES[fmt])
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _WRITERS[fmt](policy, example, path)
    return path
