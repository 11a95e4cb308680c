"""Exploration noise: action-space noise, noise generators, parameter-space noise."""

from . import action_space_noise, dispatch, generator, param_space_noise
from .action_space_noise import (
    add_clipped_normal_noise_to_action,
    add_normal_noise_to_action,
    add_ou_noise_to_action,
    add_uniform_noise_to_action,
)
from .dispatch import NOISE_MODES, noise_adder, resolve_noise_mode
from .generator import (
    ClippedNormalNoiseGen,
    NoiseGen,
    NoiseParamError,
    NoiseShapeError,
    NormalNoiseGen,
    OrnsteinUhlenbeckNoiseGen,
    UniformNoiseGen,
)
from .param_space_noise import AdaptiveParamNoise, ModelPerturbation, perturb_model

__all__ = [
    # the submodules, which were all that Machin 0.3.4 exported here
    "action_space_noise",
    "generator",
    "param_space_noise",
    "dispatch",
    "add_uniform_noise_to_action",
    "add_normal_noise_to_action",
    "add_clipped_normal_noise_to_action",
    "add_ou_noise_to_action",
    "NoiseGen",
    "UniformNoiseGen",
    "NormalNoiseGen",
    "ClippedNormalNoiseGen",
    "OrnsteinUhlenbeckNoiseGen",
    "NoiseParamError",
    "NoiseShapeError",
    "AdaptiveParamNoise",
    "ModelPerturbation",
    "perturb_model",
    "NOISE_MODES",
    "resolve_noise_mode",
    "noise_adder",
]
