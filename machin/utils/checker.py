"""Checking the inputs, outputs and parameters of a model while it trains.

:func:`check_model` attaches hooks to a model. Input and output hooks run on the
model's forward passes; parameter hooks run on its backward passes, right after
a parameter's gradient has been accumulated into ``.grad``. Each hook has the
signature::

    hook(counter, writer, model, module, name, value)

``counter`` is a :class:`~machin.utils.helper_classes.Counter` whose ``get()`` is
the number of the current pass (starting at 1), ``writer`` the tensorboardX
``SummaryWriter`` given to :func:`check_model` (may be ``None``), ``model`` the
checked model, ``module`` the submodule being checked, ``name`` a qualified name
and ``value`` the checked object. Names are ``/``-joined:
``<model name>/<module path>/input/<argument>``, ``.../output/<index or marked
name>`` and ``.../param/<parameter name>``, where the module path is the dotted
path of ``model.named_modules()`` (``block.0``); empty parts are left out, so
the model itself checked as a leaf gives ``<model name>/input/<argument>``.

The built-in NaN hooks raise :class:`CheckError` (a :class:`RuntimeError`); the
built-in range hooks write the minimum, maximum and mean of each tensor as the
scalars ``<name>/min``, ``<name>/max`` and ``<name>/mean`` at step
``counter.get()`` (the parameter hook also writes a histogram under ``<name>``).
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

import torch
from torch import nn

from .helper_classes import Counter

if TYPE_CHECKING:
    from tensorboardX import SummaryWriter

__all__ = [
    "CheckError",
    "check_model",
    "check_nan",
    "check_shape",
    "i_chk_nan",
    "i_chk_range",
    "mark_as_atom_module",
    "mark_module_output",
    "o_chk_nan",
    "o_chk_range",
    "p_chk_nan",
    "p_chk_range",
]

CheckHook = Callable[[Counter, Optional["SummaryWriter"], nn.Module, nn.Module, str, Any], None]

_atom_modules: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_output_names: weakref.WeakKeyDictionary[nn.Module, Tuple[str, ...]] = weakref.WeakKeyDictionary()


class CheckError(RuntimeError):
    """A checked tensor is invalid: it holds NaN, or has the wrong shape.

    Raised by :func:`check_nan`, :func:`check_shape` and the built-in NaN hooks. It is a
    :class:`RuntimeError`, so ``except RuntimeError`` catches it too.
    """


def check_nan(tensor: torch.Tensor, name: str = "") -> None:
    """Raise if ``tensor`` has a NaN element.

    Args:
        tensor: Tensor to check.
        name: Name of the tensor, used in the error message.

    Raises:
        CheckError: When any element is NaN (a :class:`RuntimeError`).
        TypeError: When ``tensor`` is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if _has_nan(tensor):
        count = int(torch.isnan(tensor).sum())
        raise CheckError(
            f"Tensor {name!r} contains nan: {count} of {tensor.numel()} elements are NaN"
        )


def check_shape(tensor: torch.Tensor, required_shape: Sequence[int], name: str = "") -> None:
    """Raise if ``tensor`` does not have exactly the shape ``required_shape``.

    Args:
        tensor: Tensor to check.
        required_shape: Size of every dimension.
        name: Name of the tensor, used in the error message.

    Raises:
        CheckError: When the shapes differ (a :class:`RuntimeError`).
        TypeError: When ``tensor`` is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if list(tensor.shape) != list(required_shape):
        raise CheckError(
            f"Tensor {name!r} has invalid shape, required shape {list(required_shape)}, "
            f"is {list(tensor.shape)}"
        )


def _has_nan(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and (value.is_floating_point() or value.is_complex())
        and bool(torch.isnan(value).any())
    )


def _raise_on_nan(kind: str, counter: Counter, name: str, value: Any) -> None:
    if _has_nan(value):
        raise CheckError(
            f"NaN found in {kind} {name!r} at pass {counter.get()}: the {kind} contains nan"
        )


def _write_range(counter: Counter, writer: Optional[SummaryWriter], name: str, value: Any) -> None:
    if (
        writer is None
        or not isinstance(value, torch.Tensor)
        or value.numel() == 0
        or value.is_complex()
    ):
        return
    value = value.detach().float()
    step = counter.get()
    writer.add_scalar(f"{name}/min", value.min().item(), step)
    writer.add_scalar(f"{name}/max", value.max().item(), step)
    writer.add_scalar(f"{name}/mean", value.mean().item(), step)


def i_chk_nan(
    _counter: Counter,
    _writer: Any,
    _model: nn.Module,
    _module: nn.Module,
    input_name: str,
    input_val: Any,
) -> None:
    """Raise :class:`CheckError` if the input is a tensor holding NaN.

    Args:
        input_name: Name of the input (argument name or position).
        input_val: Its value; non-tensors are skipped.
    """
    _raise_on_nan("input", _counter, input_name, input_val)


def i_chk_range(
    counter: Counter,
    writer: Any,
    _model: nn.Module,
    _module: nn.Module,
    input_name: str,
    input_val: Any,
) -> None:
    """Write the min, max and mean of a tensor input to ``writer``.

    Args:
        counter: The checker's step counter (the x axis of the scalars).
        writer: The TensorBoard ``SummaryWriter``.
        input_name: Name of the input (argument name or position).
        input_val: Its value; non-tensors are skipped.
    """
    _write_range(counter, writer, input_name, input_val)


def o_chk_nan(
    _counter: Counter,
    _writer: Any,
    _model: nn.Module,
    _module: nn.Module,
    output_name: str,
    output_val: Any,
) -> None:
    """Raise :class:`CheckError` if the output is a tensor holding NaN.

    Args:
        output_name: Name of the output (its position).
        output_val: Its value; non-tensors are skipped.
    """
    _raise_on_nan("output", _counter, output_name, output_val)


def o_chk_range(
    counter: Counter,
    writer: Any,
    _model: nn.Module,
    _module: nn.Module,
    output_name: str,
    output_val: Any,
) -> None:
    """Write the min, max and mean of a tensor output to ``writer``.

    Args:
        counter: The checker's step counter (the x axis of the scalars).
        writer: The TensorBoard ``SummaryWriter``.
        output_name: Name of the output (its position).
        output_val: Its value; non-tensors are skipped.
    """
    _write_range(counter, writer, output_name, output_val)


def p_chk_nan(
    counter: Counter,
    _writer: Any,
    _model: nn.Module,
    _module: nn.Module,
    param_name: str,
    param_val: Any,
) -> None:
    """Raise :class:`CheckError` if the parameter holds NaN.

    Args:
        counter: The checker's step counter (named in the error).
        param_name: Name of the parameter.
        param_val: The parameter (or its gradient).
    """
    _raise_on_nan("parameter", counter, param_name, param_val)


def p_chk_range(
    counter: Counter,
    writer: Any,
    _model: nn.Module,
    _module: nn.Module,
    param_name: str,
    param_val: Any,
) -> None:
    """Write the min, max and mean of the parameter, and its histogram, to ``writer``.

    Args:
        counter: The checker's step counter (the x axis of the scalars).
        writer: The TensorBoard ``SummaryWriter``.
        param_name: Name of the parameter.
        param_val: The parameter (or its gradient).
    """
    _write_range(counter, writer, param_name, param_val)
    if (
        writer is not None
        and isinstance(param_val, torch.Tensor)
        and param_val.numel() > 0
        and not param_val.is_complex()
    ):
        writer.add_histogram(param_name, param_val.detach().float().cpu(), counter.get())


def mark_as_atom_module(module: nn.Module) -> None:
    """Check ``module`` as one unit: its inputs and outputs are checked, not its children's.

    The mark is kept in a weak registry, not on the module itself.

    Raises:
        TypeError: When ``module`` is not an ``nn.Module``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    _atom_modules.add(module)


def mark_module_output(module: nn.Module, output_names: Sequence[str]) -> None:
    """Name the outputs of ``module`` for output checks; this also fixes how many it returns.

    Without names, outputs are named by position (``"0"``, ``"1"``, ...). A marked
    module that returns a different number of outputs makes the check raise
    :class:`CheckError`. The names are kept in a weak registry, not on the module.

    Args:
        module: Module to mark.
        output_names: One name per output value.

    Raises:
        TypeError: When ``module`` is not an ``nn.Module`` or a name is not a string.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
        raise TypeError(f"output_names must be a list of strings, got {output_names!r}")
    _output_names[module] = tuple(output_names)


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def _input_namer(module: nn.Module) -> Callable[[tuple, dict], List[Tuple[str, Any]]]:
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    positional = [
        p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    var_positional = next((p.name for p in parameters if p.kind is p.VAR_POSITIONAL), None)

    def name_inputs(args: tuple, kwargs: dict) -> List[Tuple[str, Any]]:
        named = []
        for index, value in enumerate(args):
            if index < len(positional):
                named.append((positional[index], value))
            elif var_positional is not None:
                named.append((f"{var_positional}_{index - len(positional)}", value))
            else:
                named.append((str(index), value))
        named.extend(kwargs.items())
        return named

    return name_inputs


def _name_outputs(module: nn.Module, path: str, output: Any) -> List[Tuple[str, Any]]:
    if isinstance(output, Mapping):
        pairs = [(str(key), value) for key, value in output.items()]
        values = [value for _, value in pairs]
    else:
        values = list(output) if isinstance(output, (tuple, list)) else [output]
        pairs = None
    names = _output_names.get(module)
    if names is not None:
        if len(names) != len(values):
            _warn_name_count(module, path, names, len(values))
        # As in 0.3.4, names pair with the first outputs; outputs beyond them are still
        # checked, under their position.
        return list(zip(names, values)) + [
            (str(i), values[i]) for i in range(len(names), len(values))
        ]
    return pairs if pairs is not None else [(str(i), value) for i, value in enumerate(values)]


_warned_name_counts: weakref.WeakSet = weakref.WeakSet()


def _warn_name_count(module: nn.Module, path: str, names: Tuple[str, ...], returned: int) -> None:
    """Warn, once per module, that its marked output names do not match what it returns."""
    if module in _warned_name_counts:
        return
    _warned_name_counts.add(module)
    warnings.warn(
        f"module {path or type(module).__name__!r} was marked with {len(names)} output names "
        f"{list(names)} but returned {returned} outputs: the names go to the first outputs, "
        f"the others are checked under their position",
        UserWarning,
        stacklevel=4,
    )


def _checked_modules(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """Leaf modules and atom modules with their paths, each module once."""
    found: List[Tuple[str, nn.Module]] = []
    seen = set()

    def walk(module: nn.Module, path: str) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        children = list(module.named_children())
        if module in _atom_modules or not children:
            found.append((path, module))
            return
        for child_name, child in children:
            walk(child, path + "." + child_name if path else child_name)

    walk(model, "")
    return found


def _owned_parameters(model: nn.Module) -> List[Tuple[str, nn.Module, str, nn.Parameter]]:
    """(module path, owner module, parameter name, parameter) for every parameter once."""
    owned = []
    seen = set()

    def walk(module: nn.Module, path: str) -> None:
        atom = module in _atom_modules
        for name, param in module.named_parameters(recurse=atom):
            if id(param) not in seen:
                seen.add(id(param))
                owned.append((path, module, name, param))
        if atom:
            return
        for child_name, child in module.named_children():
            walk(child, path + "." + child_name if path else child_name)

    walk(model, "")
    return owned


def _check_interval(value: int, arg: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{arg} must be a positive integer, got {value!r}")


def _check_hooks(hooks: Iterable[CheckHook], arg: str) -> Tuple[CheckHook, ...]:
    hooks = tuple(hooks)
    for hook in hooks:
        if not callable(hook):
            raise TypeError(f"{arg} must hold callables, got {hook!r}")
    return hooks


def check_model(
    writer: Optional[SummaryWriter],
    model: nn.Module,
    input_check_hooks: Iterable[CheckHook] = (i_chk_nan, i_chk_range),
    output_check_hooks: Iterable[CheckHook] = (o_chk_nan, o_chk_range),
    param_check_hooks: Iterable[CheckHook] = (p_chk_nan, p_chk_range),
    input_check_interval: int = 1,
    output_check_interval: int = 1,
    param_check_interval: int = 100,
    name: str = "",
) -> Callable[[], None]:
    """Attach check hooks to ``model`` (see the module description for the hook protocol).

    Inputs and outputs are checked for leaf modules (modules without children) and
    for modules marked with :func:`mark_as_atom_module`, whose children are then
    skipped. Input names come from the module's ``forward`` signature; outputs are
    numbered unless named with :func:`mark_module_output` (a returned dict is named
    by its keys). Every trainable parameter is checked once, under the module that
    owns it.

    Checks run on passes ``1, 1 + k, 1 + 2k, ...`` where ``k`` is the interval:
    forward passes of ``model`` for inputs and outputs, backward passes that
    reach a parameter for that parameter (counted per parameter).

    Example::

        writer = SummaryWriter("runs/check")
        cancel = check_model(writer, model, name="actor")
        model(torch.zeros([1, 100]))   # inputs/outputs checked and logged
        cancel()                       # every hook removed

    Args:
        writer: tensorboardX ``SummaryWriter`` handed to the hooks; the built-in
            range hooks write nothing when it is ``None``.
        model: Model to check.
        input_check_hooks: Hooks called for every input of a checked module.
        output_check_hooks: Hooks called for every output of a checked module.
        param_check_hooks: Hooks called for every parameter after its gradient is
            accumulated. Parameters that do not require gradients are not checked.
        input_check_interval: Check inputs every this many forward passes.
        output_check_interval: Check outputs every this many forward passes.
        param_check_interval: Check parameters every this many backward passes.
        name: Model name, the first part of every qualified name.

    Returns:
        A function that removes every hook this call registered.

    Raises:
        TypeError: When ``model`` is not an ``nn.Module`` or a hook is not callable.
        ValueError: When an interval is not a positive integer.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    input_check_hooks = _check_hooks(input_check_hooks, "input_check_hooks")
    output_check_hooks = _check_hooks(output_check_hooks, "output_check_hooks")
    param_check_hooks = _check_hooks(param_check_hooks, "param_check_hooks")
    _check_interval(input_check_interval, "input_check_interval")
    _check_interval(output_check_interval, "output_check_interval")
    _check_interval(param_check_interval, "param_check_interval")

    forward_counter = Counter()
    # Registered first so the count is updated before the checks of this pass.
    handles: List[Any] = [
        model.register_forward_pre_hook(lambda _module, _args: forward_counter.count())
    ]
    io = _IOChecks(writer, model, name, forward_counter)
    for path, module in _checked_modules(model):
        if input_check_hooks:
            handles.append(io.watch_inputs(path, module, input_check_hooks, input_check_interval))
        if output_check_hooks:
            handles.append(
                io.watch_outputs(path, module, output_check_hooks, output_check_interval)
            )
    if param_check_hooks:
        handles.extend(
            _watch_parameters(writer, model, name, param_check_hooks, param_check_interval)
        )

    def cancel() -> None:
        while handles:
            handles.pop().remove()

    return cancel


def _due(counter: Counter, interval: int) -> bool:
    """Whether the pass just counted is one of ``1, 1 + interval, 1 + 2 * interval, ...``."""
    return (counter.get() - 1) % interval == 0


class _IOChecks:
    """Registers the input and output checks of the modules of one :func:`check_model` call."""

    def __init__(
        self, writer: Optional[SummaryWriter], model: nn.Module, name: str, forward_counter: Counter
    ) -> None:
        self.writer = writer
        self.model = model
        self.name = name
        self.forward_counter = forward_counter

    def watch_inputs(
        self, path: str, module: nn.Module, hooks: Tuple[CheckHook, ...], interval: int
    ) -> Any:
        """Check the named inputs of ``module`` on the due forward passes; returns the hook handle."""
        name_inputs = _input_namer(module)

        def check_inputs(mod: nn.Module, args: tuple, kwargs: dict) -> None:
            if _due(self.forward_counter, interval):
                for arg_name, value in name_inputs(args, kwargs):
                    self._run(hooks, mod, _join(self.name, path, "input", arg_name), value)

        return module.register_forward_pre_hook(check_inputs, with_kwargs=True)

    def watch_outputs(
        self, path: str, module: nn.Module, hooks: Tuple[CheckHook, ...], interval: int
    ) -> Any:
        """Check the named outputs of ``module`` on the due forward passes; returns the hook handle."""

        def check_outputs(mod: nn.Module, _args: tuple, output: Any) -> None:
            if _due(self.forward_counter, interval):
                for out_name, value in _name_outputs(mod, path, output):
                    self._run(hooks, mod, _join(self.name, path, "output", out_name), value)

        return module.register_forward_hook(check_outputs)

    def _run(
        self, hooks: Tuple[CheckHook, ...], mod: nn.Module, qualified: str, value: Any
    ) -> None:
        for hook in hooks:
            hook(self.forward_counter, self.writer, self.model, mod, qualified, value)


def _watch_parameters(
    writer: Optional[SummaryWriter],
    model: nn.Module,
    name: str,
    hooks: Tuple[CheckHook, ...],
    interval: int,
) -> List[Any]:
    """Check every trainable parameter after its gradient is accumulated, counted per parameter."""
    handles = []
    for path, owner, param_name, param in _owned_parameters(model):
        if not param.requires_grad:
            continue
        qualified = _join(name, path, "param", param_name)
        counter = Counter()

        def check_param(
            p: torch.Tensor, _counter=counter, _owner=owner, _qualified=qualified
        ) -> None:
            _counter.count()
            if _due(_counter, interval):
                for hook in hooks:
                    hook(_counter, writer, model, _owner, _qualified, p)

        handles.append(param.register_post_accumulate_grad_hook(check_param))
    return handles
