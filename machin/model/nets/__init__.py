"""Network base classes, device wrappers and ResNet."""

from . import base, resnet
from .base import (
    DynamicModuleWrapper,
    ModuleWrapper,
    NeuralNetworkModule,
    StaticModuleWrapper,
    dynamic_module_wrapper,
    static_module_wrapper,
)
from .resnet import ResNet

__all__ = [
    "NeuralNetworkModule",
    "ResNet",
    "static_module_wrapper",
    "dynamic_module_wrapper",
    "ModuleWrapper",
    "StaticModuleWrapper",
    "DynamicModuleWrapper",
    "base",  # the submodules, listed in Machin 0.3.4's __all__
    "resnet",
]
