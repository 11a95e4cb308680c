"""Network base class with device information, and device wrappers for plain modules.

Algorithms move a network's inputs to its *input device* and read results on its
*output device*. A :class:`NeuralNetworkModule` works both out from where its
parameters are. A plain ``nn.Module`` can be wrapped instead:

* :func:`dynamic_module_wrapper` for a module that lives on one device but may be
  moved: the devices are read from its parameters each time they are asked for;
* :func:`static_module_wrapper` for a module spread over several devices that is
  never moved: the devices are fixed by the caller.

A wrapper is a thin ``nn.Module`` that holds the user's module as its ``module``
attribute and stores the device information itself; nothing is written onto the
user's module. Calling the wrapper calls the module, attributes the wrapper does
not have are looked up on the module (``wrapper.fc1`` is ``module.fc1``), and its
``state_dict`` has exactly the keys of the module's ``state_dict``, so
checkpoints are interchangeable between the wrapped and the bare module.
"""

from __future__ import annotations

from abc import ABC
from typing import Any, Optional, Union

import torch
from torch import nn

__all__ = [
    "NeuralNetworkModule",
    "ModuleWrapper",
    "StaticModuleWrapper",
    "DynamicModuleWrapper",
    "static_module_wrapper",
    "dynamic_module_wrapper",
]

Device = Union[str, torch.device]
_CPU = torch.device("cpu")


def _module_device(module: nn.Module, last: bool) -> torch.device:
    """Device of the first (or last) parameter of ``module``, else of a buffer, else the CPU."""
    device = None
    for tensor in module.parameters():
        device = tensor.device
        if not last:
            return device
    if device is not None:
        return device
    for tensor in module.buffers():
        return tensor.device
    return _CPU


class NeuralNetworkModule(nn.Module, ABC):
    """Base class for networks that know their input and output devices.

    The input device is the device of the parameters of the *input module* and
    the output device that of the *output module*. Both default to the whole
    network: its first parameter gives the input device and its last parameter
    the output device. A network spread over devices names the submodules with
    :meth:`set_input_module` and :meth:`set_output_module`. Each of these
    submodules must keep its parameters on a single device, and ``forward`` must
    return its results on the output module's device. An input or output module
    that is itself a ``NeuralNetworkModule`` contributes its own input (output)
    device. A module without any parameters or buffers reports the CPU.

    Subclasses implement :meth:`forward`. The modules chosen are readable as
    :attr:`input_module` and :attr:`output_module`.
    """

    def __init__(self):
        super().__init__()
        # Kept out of ``_modules`` so submodules are not registered (and saved) twice.
        self.__dict__["_input_module"] = None
        self.__dict__["_output_module"] = None

    def _set_end_module(self, module: nn.Module, arg: str) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"{arg} must be a torch.nn.Module, got {type(module).__name__}")
        if not isinstance(module, NeuralNetworkModule):
            checked = self.find_child(module, arg == "input_module")
            devices = {p.device for p in checked.parameters()}
            if len(devices) > 1:
                raise RuntimeError(
                    f"{arg[0].upper()}{arg[1:].replace('_', ' ')} must be another "
                    f"NeuralNetworkModule or locate on one single device: its parameters are "
                    f"on {sorted(str(d) for d in devices)}"
                )
        previous = self.__dict__.get("_" + arg)
        if previous is not None and self._modules.get(arg) is previous:
            del self._modules[arg]  # registered by an earlier call; replaced now
        if not any(module is sub for sub in self.modules()):
            # Not part of the network yet: register it under the argument's name, so
            # its parameters move and are saved with the network (as Machin 0.3.4 did).
            self._modules[arg] = module
        self.__dict__["_" + arg] = module

    def set_input_module(self, input_module: nn.Module) -> None:
        """Use the parameters of ``input_module`` to decide :attr:`input_device`.

        A module that is not yet part of this network is added to it as the child
        ``input_module``.

        Raises:
            TypeError: When ``input_module`` is not an ``nn.Module``.
            RuntimeError: When it is not a ``NeuralNetworkModule`` and its parameters
                (those of its first leaf, for an ``nn.Sequential``) span several devices.
        """
        self._set_end_module(input_module, "input_module")

    def set_output_module(self, output_module: nn.Module) -> None:
        """Use the parameters of ``output_module`` to decide :attr:`output_device`.

        A module that is not yet part of this network is added to it as the child
        ``output_module``.

        Raises:
            TypeError: When ``output_module`` is not an ``nn.Module``.
            RuntimeError: When it is not a ``NeuralNetworkModule`` and its parameters
                (those of its last leaf, for an ``nn.Sequential``) span several devices.
        """
        self._set_end_module(output_module, "output_module")

    @property
    def input_module(self) -> Optional[nn.Module]:
        """The module set with :meth:`set_input_module`, or ``None``."""
        module = self.__dict__.get("_input_module")
        # A subclass written for Machin 0.3.4 may assign ``self.input_module = ...``.
        return self._modules.get("input_module") if module is None else module

    @input_module.setter
    def input_module(self, module: Optional[nn.Module]) -> None:
        # Reached for non-module values only (nn.Module registers modules itself).
        if module is not None:
            raise TypeError(
                f"input_module must be a torch.nn.Module or None, got {type(module).__name__}"
            )
        if self._modules.get("input_module") is self.__dict__.get("_input_module"):
            self._modules.pop("input_module", None)
        self.__dict__["_input_module"] = None

    @property
    def output_module(self) -> Optional[nn.Module]:
        """The module set with :meth:`set_output_module`, or ``None``."""
        module = self.__dict__.get("_output_module")
        # A subclass written for Machin 0.3.4 may assign ``self.output_module = ...``.
        return self._modules.get("output_module") if module is None else module

    @output_module.setter
    def output_module(self, module: Optional[nn.Module]) -> None:
        # Reached for non-module values only (nn.Module registers modules itself).
        if module is not None:
            raise TypeError(
                f"output_module must be a torch.nn.Module or None, got {type(module).__name__}"
            )
        if self._modules.get("output_module") is self.__dict__.get("_output_module"):
            self._modules.pop("output_module", None)
        self.__dict__["_output_module"] = None

    @property
    def input_device(self) -> torch.device:
        """Device the inputs of :meth:`forward` should be on."""
        module = self.input_module
        if isinstance(module, NeuralNetworkModule) and module is not self:
            return module.input_device
        return _module_device(self if module is None else module, last=False)

    @property
    def output_device(self) -> torch.device:
        """Device the outputs of :meth:`forward` are on."""
        module = self.output_module
        if isinstance(module, NeuralNetworkModule) and module is not self:
            return module.output_device
        return _module_device(self if module is None else module, last=True)

    @staticmethod
    def find_child(seq: nn.Module, is_first: bool = True) -> nn.Module:
        """Return the first (or last) module of an ``nn.Sequential``, descending through nested ones.

        Args:
            seq: Module to search, typically an ``nn.Sequential``.
            is_first: Take the first module when true, the last one otherwise.

        Returns:
            The first (last) module that is not a non-empty ``nn.Sequential``; ``seq``
            itself when it is not one.

        Raises:
            TypeError: When ``seq`` is not an ``nn.Module``.
        """
        if not isinstance(seq, nn.Module):
            raise TypeError(f"seq must be a torch.nn.Module, got {type(seq).__name__}")
        while isinstance(seq, nn.Sequential) and len(seq) > 0:
            seq = seq[0] if is_first else seq[-1]
        return seq

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the network's output; subclasses implement it.

        Raises:
            NotImplementedError: Always, here.
        """
        raise NotImplementedError(
            f"{type(self).__name__} is a NeuralNetworkModule without a forward() method; "
            "subclasses must implement forward"
        )


def _strip_module_prefix(
    module: nn.Module, state_dict: dict, prefix: str, _local_metadata: dict
) -> None:
    """``state_dict`` post-hook of wrappers: ``<prefix>module.x`` becomes ``<prefix>x``."""
    inner = prefix + "module."
    for key in [key for key in state_dict if key.startswith(inner)]:
        state_dict[prefix + key[len(inner) :]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        for key in [key for key in metadata if key == inner[:-1] or key.startswith(inner)]:
            metadata[prefix + key[len(inner) :] if key != inner[:-1] else prefix[:-1]] = (
                metadata.pop(key)
            )


def _add_module_prefix(module: nn.Module, state_dict: dict, prefix: str, *_: Any) -> None:
    """``load_state_dict`` pre-hook of wrappers: ``<prefix>x`` becomes ``<prefix>module.x``."""
    for key in [key for key in state_dict if key.startswith(prefix)]:
        state_dict[prefix + "module." + key[len(prefix) :]] = state_dict.pop(key)


class ModuleWrapper(NeuralNetworkModule):
    """A thin module around ``module`` (see the module description); base of the wrappers.

    Args:
        module: The module to wrap.

    Raises:
        TypeError: When ``module`` is not an ``nn.Module``.
    """

    def __init__(self, module: nn.Module):
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"wrapped_module must be a torch.nn.Module, got {type(module).__name__}"
            )
        super().__init__()
        self.module = module
        if hasattr(self, "register_state_dict_post_hook"):
            self.register_state_dict_post_hook(_strip_module_prefix)
            self.register_load_state_dict_pre_hook(_add_module_prefix)
        else:  # torch < 2.5 only has the private spellings
            self._register_state_dict_hook(_strip_module_prefix)
            self._register_load_state_dict_pre_hook(_add_module_prefix, with_module=True)

    @property
    def wrapped_module(self) -> nn.Module:
        """The wrapped module (the same as ``module``)."""
        return self._modules["module"]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped module with the same arguments."""
        return self.module(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        """Load into the wrapped module (same arguments as :meth:`torch.nn.Module.load_state_dict`).

        Errors then name the wrapped module's class and its own parameter names.
        """
        return self.module.load_state_dict(state_dict, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules")
            if name.startswith("__") or not modules or "module" not in modules:
                raise
            return getattr(modules["module"], name)


class DynamicModuleWrapper(ModuleWrapper):
    """Wrapper whose devices are read from the wrapped module's parameters when asked for.

    The wrapped module must keep its parameters on one device, but may be moved.
    Created by :func:`dynamic_module_wrapper`.
    """


class StaticModuleWrapper(ModuleWrapper):
    """Wrapper with fixed input and output devices, for a module that must not be moved.

    Created by :func:`static_module_wrapper`.

    Args:
        module: The module to wrap.
        input_device: Device for the inputs.
        output_device: Device of the outputs.

    Raises:
        TypeError: When ``module`` is not an ``nn.Module``.
        ValueError: When a device is not a valid ``torch.device`` or device string.
    """

    def __init__(self, module: nn.Module, input_device: Device, output_device: Device):
        super().__init__(module)
        self.__dict__["_static_input_device"] = _as_device(input_device, "input_device")
        self.__dict__["_static_output_device"] = _as_device(output_device, "output_device")

    @property
    def input_device(self) -> torch.device:
        """The fixed input device."""
        return self.__dict__["_static_input_device"]

    @property
    def output_device(self) -> torch.device:
        """The fixed output device."""
        return self.__dict__["_static_output_device"]

    def extra_repr(self) -> str:
        return f"input_device={self.input_device}, output_device={self.output_device}"


def _as_device(device: Device, arg: str) -> torch.device:
    try:
        return torch.device(device)
    except (TypeError, RuntimeError) as error:
        raise ValueError(
            f"{arg} must be a torch.device or a device string such as 'cuda:0', got {device!r}"
        ) from error


def _unwrap(module: nn.Module) -> nn.Module:
    return module.module if isinstance(module, ModuleWrapper) else module


def static_module_wrapper(
    wrapped_module: nn.Module, input_device: Device, output_device: Device
) -> StaticModuleWrapper:
    """Wrap a module with fixed input and output devices.

    The module may be spread over several devices but must not be moved after
    wrapping (the devices would no longer be right). Wrapping a wrapper replaces
    its device information instead of nesting.

    Args:
        wrapped_module: The module to wrap.
        input_device: Device for the inputs.
        output_device: Device of the outputs.

    Returns:
        The wrapper; use it in place of the module.

    Raises:
        TypeError: When ``wrapped_module`` is not an ``nn.Module``.
        ValueError: When a device is not valid.
    """
    if not isinstance(wrapped_module, nn.Module):
        raise TypeError(
            f"wrapped_module must be a torch.nn.Module, got {type(wrapped_module).__name__}"
        )
    return StaticModuleWrapper(_unwrap(wrapped_module), input_device, output_device)


def dynamic_module_wrapper(wrapped_module: nn.Module) -> DynamicModuleWrapper:
    """Wrap a module whose input and output devices are detected when asked for.

    The module must keep its parameters on one device, but may be moved (also after
    wrapping). Wrapping a wrapper replaces its device information instead of nesting.

    Args:
        wrapped_module: The module to wrap.

    Returns:
        The wrapper; use it in place of the module.

    Raises:
        TypeError: When ``wrapped_module`` is not an ``nn.Module``.
    """
    if not isinstance(wrapped_module, nn.Module):
        raise TypeError(
            f"wrapped_module must be a torch.nn.Module, got {type(wrapped_module).__name__}"
        )
    return DynamicModuleWrapper(_unwrap(wrapped_module))
