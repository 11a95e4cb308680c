"""Calling user networks by keyword, and copying parameters between networks.

``safe_call`` is how every algorithm talks to the networks a user hands it: the
algorithm passes dictionaries (the state dict, the action dict, ...) and the keys
that name an argument of the network's ``forward`` are passed as keyword
arguments. The signature of ``forward`` is read once per module and cached.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import torch
from torch import nn

from ...utils.torch_internals import (
    TorchInternalsError,
    buffer_slots,
    foreach_lerp_,
    parameter_slots,
)

__all__ = [
    "safe_call",
    "forward_takes",
    "safe_return",
    "determine_device",
    "MissingArgumentError",
    "first_model_server",
    "soft_update",
    "hard_update",
    "assert_output_is_probs",
    "get_input_device",
    "as_column",
    "Hidden",
    "map_hidden",
    "SharedNetworkSync",
]


class _Signature:
    """What ``safe_call`` needs to know about one module's ``forward``."""

    __slots__ = (
        "names",
        "required",
        "required_set",
        "accepts_any",
        "class_name",
        "first_parameter",
    )

    def __init__(
        self, names: Tuple[str, ...], required: Tuple[str, ...], accepts_any: bool, class_name: str
    ):
        self.names = frozenset(names)
        self.required = required
        self.required_set = frozenset(required)  # for one C-level check per call
        self.accepts_any = accepts_any
        self.class_name = class_name
        # What get_input_device remembered for a plain module, kept here too so that
        # safe_call finds both with one lookup.
        self.first_parameter: Optional[_Remembered] = None


_signatures: weakref.WeakKeyDictionary[nn.Module, _Signature] = weakref.WeakKeyDictionary()
_warned_classes: set = set()
_MISSING = object()
#: A plain module's first parameter (or buffer), with the dict of its owning module and its
#: key there: ``(tensor, owner_dict, key)``.
_Remembered = Tuple[torch.Tensor, Dict[str, Any], str]
_first_parameter: weakref.WeakKeyDictionary[nn.Module, _Remembered] = weakref.WeakKeyDictionary()
_parameter_lists: weakref.WeakKeyDictionary[nn.Module, tuple] = weakref.WeakKeyDictionary()


def _tensors(module: nn.Module) -> tuple:
    """``(parameters, has_buffers)`` of a module, remembered after the first call.

    Parameters keep their identity when a module is moved or loaded, so the list stays
    valid; buffers are replaced by moves and are therefore listed afresh when present.
    """
    entry = _parameter_lists.get(module)
    if entry is None:
        entry = _parameter_lists[module] = (
            list(module.parameters()),
            next(module.buffers(), None) is not None,
        )
    return entry


def _unwrap(model: nn.Module) -> nn.Module:
    """Follow ``.module`` (DataParallel/DDP-like) or ``._orig_mod`` (``torch.compile``) through
    wrappers whose forward takes anything."""
    inner = model
    while True:
        wrapped = getattr(inner, "module", None)
        if not isinstance(wrapped, nn.Module):
            wrapped = getattr(inner, "_orig_mod", None)
        if not isinstance(wrapped, nn.Module):
            break
        params = inspect.signature(inner.forward).parameters.values()
        if not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params):
            break
        inner = wrapped
    return inner


def _read_signature(model: nn.Module) -> _Signature:
    class_name = type(model).__name__
    if isinstance(model, torch.jit.ScriptModule):
        # Every scripted module is a RecursiveScriptModule; name the class that was scripted.
        class_name = getattr(model, "original_name", None) or class_name
        try:
            arguments = model.forward.schema.arguments[1:]  # skip self
        except (AttributeError, RuntimeError) as error:
            raise TypeError(
                f"safe_call cannot read the forward signature of the TorchScript module "
                f"{class_name}: {error}"
            ) from error
        names = tuple(a.name for a in arguments)
        # An argument without a default value is required.
        required = tuple(a.name for a in arguments if not a.has_default_value())
        return _Signature(names, required, False, class_name)

    inner = _unwrap(model)
    try:
        parameters = inspect.signature(inner.forward).parameters.values()
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"safe_call cannot read the forward signature of {class_name}: {error}"
        ) from error
    names, required, accepts_any = [], [], False
    for p in parameters:
        if p.kind is p.VAR_KEYWORD:
            accepts_any = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            names.append(p.name)
            if p.default is p.empty:
                required.append(p.name)
    if inner is not model:  # name the wrapped network, which is what the user wrote
        class_name = f"{type(inner).__name__} (in {class_name})"
    return _Signature(tuple(names), tuple(required), accepts_any, class_name)


def get_input_device(model: nn.Module) -> Optional[torch.device]:
    """Return the device a module's inputs should be on.

    The ``input_device`` attribute of :class:`~machin.model.nets.NeuralNetworkModule`
    and of the module wrappers is used when present. Otherwise the device is read from
    the module's parameters and buffers, silently when they all live on one device.
    When they are spread over several devices, the first parameter's device is used and
    a warning (once per class) says how to declare the right one; a module with neither
    parameters nor buffers gets ``None`` (inputs are not moved) and the same kind of
    warning.
    """
    # For a plain module (no ``input_device`` on its class, not a wrapper) the first parameter
    # is remembered and asked for its device on every call, as long as its module still holds
    # it (``.to()`` keeps a parameter between CPU and GPU but replaces it e.g. for ``"meta"``).
    remembered = _still_held(_first_parameter.get(model), model)
    if remembered is not None:
        return remembered.device
    device = getattr(model, "input_device", None)
    if device is None:  # a DDP / compile wrapper of a module that declares one
        device = getattr(_unwrap(model), "input_device", None)
    if device is not None:
        return torch.device(device)
    tensors = [*model.parameters(), *model.buffers()]
    if not tensors:
        _warn_once(
            type(model),
            "has no parameters or buffers, so machin cannot tell which device its inputs "
            "belong on and leaves them where they are",
        )
        return None
    tensor = tensors[0]
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        _warn_once(
            type(model),
            f"has parameters on several devices ({', '.join(sorted(map(str, devices)))}); "
            f"its inputs go to the device of its first parameter ({tensor.device})",
        )
    if _unwrap(model) is model and not _declares_input_device(type(model)):
        holder = _holder(model, tensor)
        if holder is not None:
            _first_parameter[model] = holder
    return tensor.device


def _still_held(remembered: Optional[_Remembered], model: nn.Module) -> Optional[torch.Tensor]:
    """The remembered first tensor while its module still holds it and no device was declared since."""
    if remembered is None or remembered[1].get(remembered[2]) is not remembered[0]:
        return None
    return None if "input_device" in model.__dict__ else remembered[0]


def _holder(model: nn.Module, tensor: torch.Tensor) -> Optional[_Remembered]:
    """``(tensor, dict of the submodule that holds it, its key there)``; ``None`` where the
    module keeps its tensors in something else than dicts (TorchScript)."""
    for module in model.modules():
        try:
            stores = (parameter_slots(module), buffer_slots(module))
        except TorchInternalsError:
            return None
        for store in stores:
            for key, value in store.items():
                if value is tensor:
                    return tensor, store, key
    return None


def _declares_input_device(cls: type) -> bool:
    """Whether ``cls`` defines ``input_device`` (the nearest definition; a plain ``None`` declares nothing)."""
    for klass in cls.__mro__:
        value = vars(klass).get("input_device", _MISSING)
        if value is not _MISSING:
            return value is not None
    return False


def _warn_once(cls: type, problem: str) -> None:
    if cls in _warned_classes:
        return
    _warned_classes.add(cls)
    warnings.warn(
        f"{cls.__name__} {problem}. Declare its input device by wrapping it with "
        f"machin.model.nets.static_module_wrapper or dynamic_module_wrapper, or by "
        f"subclassing NeuralNetworkModule.",
        stacklevel=4,
    )


class MissingArgumentError(TypeError, RuntimeError):
    """A network's ``forward`` needs an argument that no dictionary supplied.

    A ``TypeError`` (what Python raises for a missing argument) and a ``RuntimeError``
    (what Machin 0.3.4 raised).
    """


def determine_device(model: nn.Module) -> list:
    """The distinct devices (as strings) that hold ``model``'s parameters."""
    return list(dict.fromkeys(str(p.device) for p in model.parameters()))


def safe_return(result: tuple) -> Any:
    """``result[0]`` for a one-element tuple, ``result`` itself otherwise (0.3.4's unwrapping)."""
    return result[0] if len(result) == 1 else result


def first_model_server(model_server: Any, owner: str) -> Any:
    """The model-server accessor a distributed algorithm uses: ``model_server[0]``.

    As in Machin 0.3.4, further elements are ignored, so the tuple that
    ``model_server_helper(model_num=2)`` returns can be passed as it is.

    Args:
        model_server: A tuple (or list) of ``PushPullModelServer`` accessors.
        owner: Name of the algorithm, for the error message.

    Raises:
        ValueError: When ``model_server`` is not a non-empty sequence.
    """
    if not isinstance(model_server, (tuple, list)) or len(model_server) < 1:
        raise ValueError(
            f"model_server of {owner} must be a tuple whose first element is a PushPullModelServer "
            f"accessor (e.g. what model_server_helper returns), got {model_server!r}"
        )
    return model_server[0]


class SharedNetworkSync:
    """Pulls and pushes of the one network a distributed algorithm shares through its model server.

    Used by the Ape-X algorithms and IMPALA: samplers pull the newest network before acting
    (unless :meth:`set_sync` turned that off), learners push it after every update. The host
    names the network in ``_shared_network`` (an attribute name) and calls
    :meth:`_init_sync` in its constructor.
    """

    _shared_network = ""

    def _init_sync(self, model_server: Any, owner: str) -> None:
        self.model_server = (first_model_server(model_server, owner),)
        self.is_syncing = True

    def set_sync(self, is_syncing: bool) -> None:
        """Turn the automatic pull of the shared network before acting on or off.

        Args:
            is_syncing: ``True`` to pull the newest parameters before every act call.
        """
        self.is_syncing = bool(is_syncing)

    def manual_sync(self) -> bool:
        """Load the newest shared network from the model server.

        Returns:
            ``False`` when no learner has pushed yet (the network is unchanged).
        """
        return self.model_server[0].pull(getattr(self, self._shared_network))

    def _maybe_sync(self) -> None:
        if self.is_syncing:
            self.manual_sync()

    def publish(self) -> bool:
        """Push the shared network to the model server now, e.g. after loading a checkpoint.

        Updates push after every step; this lets samplers pull a resumed learner's network
        before its first update.

        Returns:
            Whether the model server took it (``False``: it held a newer version, which was
            loaded instead).
        """
        return self.model_server[0].push(getattr(self, self._shared_network))


def forward_takes(model: nn.Module, name: str) -> bool:
    """Whether :func:`safe_call` would pass a key ``name`` to ``model``.

    That is, whether ``model``'s ``forward`` has an argument called ``name`` or takes
    ``**kwargs`` (read from the same cached signature as :func:`safe_call`).

    Args:
        model: The network.
        name: The argument name.
    """
    signature = _signatures.get(model)
    if signature is None:
        signature = _signatures[model] = _read_signature(model)
    return signature.accepts_any or name in signature.names


def safe_call(
    model: nn.Module, *named_args: Optional[Dict[str, Any]], required_argument: Iterable[str] = ()
):
    """Call ``model`` with the entries of ``named_args`` whose keys name ``forward`` arguments.

    Keys that are not arguments of ``forward`` are ignored (unless ``forward`` takes
    ``**kwargs``, then every key is passed). Tensors are moved to the model's input
    device when they are elsewhere. The model's return value is passed back as is.

    Args:
        model: The network to call.
        *named_args: Dictionaries of keyword arguments; ``None`` entries are skipped.
            When two dictionaries share a key, the later one wins.
        required_argument: Names that must be supplied even if ``forward`` gives them a default.

    Returns:
        Whatever ``model`` returns.

    Raises:
        MissingArgumentError: (a ``TypeError`` and a ``RuntimeError``) when an argument of
            ``forward`` without a default (or one listed in ``required_argument``) has no matching key. The message names the network
            class, the missing arguments and the keys that were given.
        TypeError: When an entry of ``named_args`` is neither a mapping nor ``None``.
        RuntimeError: Any ``RuntimeError`` of the network (e.g. a shape mismatch) is re-raised
            as the same type, prefixed with the network class and the shapes of its inputs, and
            chained (``from``) to the original.
        TypeError: When the network fails with a ``TypeError`` and some inputs are numpy
            values: the message names them and says to convert them to tensors.
    """
    signature = _signatures.get(model)
    if signature is None:
        signature = _signatures[model] = _read_signature(model)
    first = _still_held(signature.first_parameter, model)
    if first is not None:
        device = first.device
    else:
        device = get_input_device(model)
        signature.first_parameter = _first_parameter.get(model)

    kwargs = {}
    names = signature.names
    accepts_any = signature.accepts_any
    for arg_dict in named_args:
        if arg_dict is None:
            continue
        if type(arg_dict) is not dict and not isinstance(arg_dict, Mapping):
            if isinstance(arg_dict, (tuple, list)) and not arg_dict:
                continue  # 0.3.4 skipped every empty argument
            _raise_not_a_dict(signature.class_name, arg_dict)
        for key, value in arg_dict.items():
            if accepts_any or key in names:
                if (
                    device is not None
                    and isinstance(value, torch.Tensor)
                    and value.device != device
                ):
                    value = value.to(device)
                kwargs[key] = value

    if kwargs.keys() >= signature.required_set and not required_argument:
        missing = None
    else:
        missing = [name for name in signature.required if name not in kwargs]
        missing += [
            name for name in required_argument if name not in kwargs and name not in missing
        ]
    if missing:
        given = sorted({key for d in named_args if d for key in d})
        raise MissingArgumentError(
            f"Missing required arguments: {signature.class_name}.forward requires argument(s) {missing}, "
            f"but the dictionaries passed to it have the keys {given}. "
            f"Name the dictionary keys after the forward arguments."
        )
    try:
        return model(**kwargs)
    except RuntimeError as error:
        _raise_with_input_shapes(signature.class_name, kwargs, error)
    except TypeError as error:
        _raise_if_given_numpy(signature.class_name, kwargs, error)
        raise


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # a numpy array
        return f"{type(value).__name__}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({', '.join(_describe(v) for v in value[:4])}{', ...' if len(value) > 4 else ''})"
    return type(value).__name__


def _raise_not_a_dict(class_name: str, value: Any) -> None:
    raise TypeError(
        f"the inputs of {class_name} must be given as a Dict[str, Tensor] keyed by its forward "
        f'argument names (e.g. state={{"state": tensor[B, ...]}}), got {_describe(value)}'
    )


def _raise_with_input_shapes(class_name: str, kwargs: Dict[str, Any], error: RuntimeError) -> None:
    """Re-raise a RuntimeError of a network call, naming the network and the shapes it was given."""
    shapes = ", ".join(f"{key}: {_describe(value)}" for key, value in kwargs.items())
    try:
        new_error = type(error)(
            f"{class_name} failed on inputs ({shapes}); check the state/action "
            f"shapes against the network: {error}"
        )
    except Exception:  # an error type that cannot be built from a message: leave it as it is
        raise error from None
    raise new_error from error


def _raise_if_given_numpy(class_name: str, kwargs: Dict[str, Any], error: TypeError) -> None:
    """A network that failed with a TypeError on numpy inputs: say which input to convert."""
    arrays = [key for key, value in kwargs.items() if type(value).__module__ == "numpy"]
    if arrays:
        raise TypeError(
            f"{class_name} was given numpy values for {arrays} ({', '.join(_describe(kwargs[k]) for k in arrays)}); "
            f"networks take torch tensors: convert them first, e.g. torch.as_tensor(x, dtype=torch.float32)"
        ) from error


def soft_update(target_net: nn.Module, source_net: nn.Module, update_rate: float) -> None:
    """Move ``target_net`` towards ``source_net``: ``target = (1 - rate) * target + rate * source``.

    Floating-point parameters and buffers are blended; other buffers (counters such
    as BatchNorm's ``num_batches_tracked``) are copied.

    Args:
        target_net: The network that moves.
        source_net: The network it moves towards.
        update_rate: The step ``rate`` in ``[0, 1]``.
    """
    soft_update_pairs(((source_net, target_net),), update_rate)


@torch.no_grad()
def soft_update_pairs(pairs: Iterable[Tuple[nn.Module, nn.Module]], update_rate: float) -> None:
    """:func:`soft_update` of every ``(source, target)`` pair, their parameters in one ``foreach`` call.

    Args:
        pairs: ``(source, target)`` networks; each target moves towards its source.
        update_rate: The step ``rate`` in ``[0, 1]``.
    """
    targets: List[torch.Tensor] = []
    sources: List[torch.Tensor] = []
    with_buffers = []
    for source_net, target_net in pairs:
        target_params, target_buffers = _tensors(target_net)
        source_params, _ = _tensors(source_net)
        if len(target_params) != len(source_params):
            raise ValueError(
                f"soft_update needs networks of the same structure, got {len(target_params)} target "
                f"parameters and {len(source_params)} source parameters"
            )
        targets += target_params
        sources += source_params
        if target_buffers:
            with_buffers.append((source_net, target_net))
    if targets:
        foreach_lerp_(targets, sources, update_rate)
    for source_net, target_net in with_buffers:
        for t, s in zip(target_net.buffers(), source_net.buffers()):
            if t.is_floating_point():
                t.lerp_(s, update_rate)
            else:
                t.copy_(s)


@torch.no_grad()
def hard_update(target_net: nn.Module, source_net: nn.Module) -> None:
    """Copy every parameter and buffer of ``source_net`` into ``target_net``."""
    for t, s in zip(target_net.parameters(), source_net.parameters()):
        t.copy_(s)
    for t, s in zip(target_net.buffers(), source_net.buffers()):
        t.copy_(s)


def assert_output_is_probs(tensor: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``tensor`` is ``[B, N]`` with non-negative rows summing to 1."""
    if tensor.dim() != 2:
        raise ValueError(
            f"Input tensor is not a probability tensor: expected action probabilities of shape "
            f"[batch_size, action_num], got shape {tuple(tensor.shape)}"
        )
    if not torch.all(tensor >= 0) or not torch.allclose(
        tensor.sum(dim=1), torch.ones((), dtype=tensor.dtype, device=tensor.device), atol=1e-5
    ):
        raise ValueError(
            "Input tensor is not a probability tensor: expected action probabilities (non-negative "
            "rows that sum to 1, e.g. a softmax output), "
            f"got rows summing to {tensor.sum(dim=1).tolist()[:4]}"
        )


def as_column(tensor: Any, size: int, what: str) -> torch.Tensor:
    """View a per-sample network output of shape ``[B]`` or ``[B, 1]`` as ``[B, 1]``.

    Args:
        tensor: The network output.
        size: The batch size ``B``.
        what: What the output is, for the error message (e.g. ``"log_prob of A2C's actor"``).

    Raises:
        ValueError: When ``tensor`` is not a tensor with exactly one value per sample.
    """
    if (
        not isinstance(tensor, torch.Tensor)
        or tensor.numel() != size
        or (tensor.dim() > 0 and tensor.shape[0] != size)
    ):
        shape = list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(
            f"{what} must hold one value per sample, shape [{size}] or [{size}, 1], got {shape}"
        )
    # a no-op view would still add a node to the backward pass
    return tensor if tensor.dim() == 2 else tensor.view(size, 1)


#: A recurrent hidden state: one tensor, or a tuple of tensors such as an LSTM's ``(h, c)``.
Hidden = Union[torch.Tensor, Tuple[torch.Tensor, ...]]


def map_hidden(function: Callable[..., torch.Tensor], *hiddens: Hidden) -> Hidden:
    """Apply ``function`` to hidden states, part by part when they are tuples.

    Args:
        function: Takes one tensor from each of ``hiddens`` and returns a tensor.
        *hiddens: Hidden states of one structure (all tensors, or all tuples of the
            same length).

    Returns:
        ``function(*hiddens)``, or the tuple of ``function`` applied to each part.
    """
    if isinstance(hiddens[0], tuple):
        return tuple(function(*parts) for parts in zip(*hiddens))
    return function(*hiddens)
