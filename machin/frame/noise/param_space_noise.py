"""Parameter-space noise (Plappert et al., "Parameter Space Noise for Exploration").

:func:`perturb_model` makes a model run with noisy parameters whenever a switch
is on. It works through two hooks on the model:

* a forward pre-hook puts, in place of every parameter, a tensor whose value is
  the noisy parameter and whose gradient flows straight into the clean
  parameter (``noisy + (clean - clean.detach())``);
* a forward hook, which runs even when the forward raises, puts the clean
  parameters back.

The parameters therefore hold their clean values at every moment outside a
forward pass: a backward pass through a noisy output computes the gradient at
the noisy point and accumulates it into the clean parameters, the optimizer
updates the clean weights, and no noise ever reaches ``state_dict()``.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ...utils.compat import ExtraArgumentsWarning
from ...utils.torch_internals import forward_pre_hooks, parameter_slots
from .generator import NormalNoiseGen, _check_sigma, _real

if TYPE_CHECKING:
    from machin.utils.helper_classes import Switch

__all__ = ["AdaptiveParamNoise", "ModelPerturbation", "perturb_model"]


class AdaptiveParamNoise:
    r"""Adaptive standard deviation of parameter noise.

    With :math:`\sigma_k` the current standard deviation, :math:`\alpha` the adoption
    coefficient, :math:`\delta` the desired action standard deviation and :math:`d` the
    measured distance between clean and noisy actions:

    .. math::

        \sigma_{k+1} = \begin{cases} \alpha \sigma_k & d \le \delta \\
                                     \sigma_k / \alpha & d > \delta \end{cases}

    Args:
        initial_stddev: Starting standard deviation of the parameter noise, not negative.
        desired_action_stddev: Target distance :math:`\delta` between clean and noisy
            actions, not negative.
        adoption_coefficient: Factor :math:`\alpha` of each adaptation step, at least 1.

    Attributes:
        initial_stddev: The starting standard deviation.
        current_stddev: The current standard deviation (see :meth:`get_dev`).

    Raises:
        TypeError: An argument is not a real number.
        ValueError: An argument is out of its range.
    """

    def __init__(
        self,
        initial_stddev: float = 0.1,
        desired_action_stddev: float = 0.1,
        adoption_coefficient: float = 1.01,
    ):
        owner = "AdaptiveParamNoise"
        self.initial_stddev = _real(owner, "initial_stddev", initial_stddev)
        self.current_stddev = self.initial_stddev
        self.desired_action_stddev = _real(owner, "desired_action_stddev", desired_action_stddev)
        self.adoption_coefficient = _real(owner, "adoption_coefficient", adoption_coefficient)
        _check_sigma(owner, "initial_stddev", self.current_stddev)
        _check_sigma(owner, "desired_action_stddev", self.desired_action_stddev)
        if not self.adoption_coefficient >= 1.0:
            raise ValueError(
                f"{owner}: adoption_coefficient must be at least 1, got {adoption_coefficient!r}"
            )

    def adapt(self, distance: float) -> None:
        """Grow the standard deviation if ``distance`` is within the target, else shrink it.

        Args:
            distance: Current distance between noisy and clean actions (a real number or
                a one-element tensor).

        Raises:
            TypeError: ``distance`` is not a number.
            ValueError: ``distance`` is NaN.
        """
        if isinstance(distance, torch.Tensor) and distance.numel() == 1:
            distance = distance.item()
        if not isinstance(distance, numbers.Real) or isinstance(distance, bool):
            raise TypeError(
                f"AdaptiveParamNoise.adapt: distance must be a real number, "
                f"got {distance!r} ({type(distance).__name__})"
            )
        if math.isnan(distance):
            raise ValueError("AdaptiveParamNoise.adapt: distance must not be NaN, got nan")
        if distance <= self.desired_action_stddev:
            self.current_stddev *= self.adoption_coefficient
        else:
            self.current_stddev /= self.adoption_coefficient

    def get_dev(self) -> float:
        """Return the current standard deviation of the parameter noise.

        Returns:
            The current standard deviation.
        """
        return self.current_stddev

    def __repr__(self) -> str:
        # The format of Machin 0.3.4: initial and desired standard deviations, coefficient.
        return (
            f"AdaptiveParamNoise(i_std={self.initial_stddev}, da_std={self.desired_action_stddev}, "
            f"adpt_coeff={self.adoption_coefficient})"
        )


def _rms_distance(clean: Any, noisy: Any) -> float:
    """Root mean square difference of two outputs (of their first elements for tuples)."""
    if isinstance(clean, (tuple, list)):
        clean, noisy = clean[0], noisy[0]
    return torch.sqrt(torch.mean((clean - noisy) ** 2)).item()


class ModelPerturbation:
    """Handle returned by :func:`perturb_model`; calling it cancels the perturbation.

    Built by :func:`perturb_model`, which checks the arguments; it is not meant to be
    constructed directly.

    Args:
        model: The model to perturb.
        perturb_switch: Switch that enables the noise.
        reset_switch: Switch that asks for a fresh noise set at each perturbed pass.
        distance_func: ``distance_func(clean_output, noisy_output) -> float``.
        adaptive_noise: Source of the current noise standard deviation.
        make_noise: ``make_noise(parameter_name, parameter, std)`` returning the noise of
            one parameter.
        reset_noise: Resets the state of the noise generators.
        debug_backward: Print a message when a backward pass reaches a perturbed parameter.

    Attributes:
        model: The perturbed model.
        adaptive_noise: The :class:`AdaptiveParamNoise` whose standard deviation scales
            the noise.
    """

    def __init__(
        self,
        model: nn.Module,
        perturb_switch: Switch,
        reset_switch: Switch,
        distance_func: Callable[[Any, Any], float],
        adaptive_noise: AdaptiveParamNoise,
        make_noise: Callable[[str, torch.Tensor, float], torch.Tensor],
        reset_noise: Callable[[], None],
        debug_backward: bool,
    ):
        self.model = model
        self.adaptive_noise = adaptive_noise
        self._perturb_switch = perturb_switch
        self._reset_switch = reset_switch
        self._distance_func = distance_func
        self._make_noise = make_noise
        self._reset_noise = reset_noise
        self._debug_backward = debug_backward
        # Canonical name -> (owning module, attribute name), and every (module, attribute,
        # canonical name) that holds a perturbed parameter (tied parameters have several).
        self._owners: Dict[str, Tuple[nn.Module, str]] = {}
        self._slots: List[Tuple[nn.Module, str, str]] = []
        self._collect_slots()
        # Noisy values of the current noise set (detached), and whether the adaptive
        # standard deviation has already been updated from this set.
        self._noisy: Optional[Dict[str, torch.Tensor]] = None
        self._measured = False
        # Clean parameters taken out of the model during a forward pass, and the nesting
        # depth of forward passes of the model (only the outermost one is handled).
        self._swapped: Optional[Dict[str, torch.Tensor]] = None
        self._depth = 0
        self._handles = [
            model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
            model.register_forward_hook(self._post_forward, with_kwargs=True, always_call=True),
        ]

    @property
    def active(self) -> bool:
        """Whether the hooks are still registered on the model."""
        return bool(self._handles)

    def __call__(self) -> None:
        """Remove every hook and leave the clean parameters in the model; idempotent."""
        self._restore()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def reset(self) -> None:
        """Forget the current noise set and reset the noise generators.

        The parameters are clean already outside forward passes; after a reset, the next
        perturbed forward pass draws a fresh noise set whatever the reset switch says.
        """
        self._noisy = None
        self._measured = False
        self._reset_noise()

    # --------------------------------------------------------------------------------
    # Hooks.

    def _pre_forward(self, _module: nn.Module, _args: Any, _kwargs: Any) -> None:
        self._depth += 1
        if self._depth > 1 or not self._perturb_switch.get():
            return
        clean = self._clean_params()
        reset = self._reset_switch.get()  # read once per perturbed pass (triggers are one-shot)
        if reset or self._noisy is None or self._is_stale(clean):
            self._draw(clean)
        self._swap_in(clean, self._noisy, track_grad=torch.is_grad_enabled())

    def _post_forward(self, _module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if self._depth == 0:  # the pre-hook did not run (an earlier pre-hook raised)
            return
        self._depth -= 1
        if self._depth > 0:
            return
        if self._swapped is not None:
            self._restore()
            return
        if output is None or self._noisy is None or self._measured:
            return
        clean = self._clean_params()
        if self._is_stale(clean):
            return
        self._measured = True
        self._swap_in(clean, self._noisy, track_grad=False)
        try:
            with torch.no_grad():
                noisy_output = self.model.forward(*args, **kwargs)
                distance = self._distance_func(output, noisy_output)
        finally:
            self._restore()
        self.adaptive_noise.adapt(distance)

    # --------------------------------------------------------------------------------
    # Parameter bookkeeping.

    def _collect_slots(self) -> None:
        canonical = {id(p): name for name, p in self.model.named_parameters()}
        for module in self.model.modules():
            for attr, param in parameter_slots(module).items():
                if param is not None and id(param) in canonical:
                    name = canonical[id(param)]
                    self._owners.setdefault(name, (module, attr))
                    self._slots.append((module, attr, name))

    def _clean_params(self) -> Dict[str, torch.Tensor]:
        return {
            name: parameter_slots(module)[attr] for name, (module, attr) in self._owners.items()
        }

    def _is_stale(self, clean: Dict[str, torch.Tensor]) -> bool:
        """Whether the noise set no longer fits the parameters (moved, cast or replaced)."""
        return any(
            noisy.shape != clean[name].shape
            or noisy.dtype != clean[name].dtype
            or noisy.device != clean[name].device
            for name, noisy in self._noisy.items()
        )

    def _draw(self, clean: Dict[str, torch.Tensor]) -> None:
        std = self.adaptive_noise.get_dev()
        noisy = {}
        with torch.no_grad():
            for name, param in clean.items():
                noise = self._make_noise(name, param, std)
                if not isinstance(noise, torch.Tensor) or noise.shape != param.shape:
                    given = list(noise.shape) if isinstance(noise, torch.Tensor) else repr(noise)
                    raise ValueError(
                        f"perturb_model: the noise for parameter {name!r} must be a tensor of "
                        f"shape {list(param.shape)}, got {given}"
                    )
                noisy[name] = param.detach() + noise.to(param.device, param.dtype)
        self._noisy, self._measured = noisy, False

    def _swap_in(
        self, clean: Dict[str, torch.Tensor], noisy: Dict[str, torch.Tensor], track_grad: bool
    ) -> None:
        replacement = {}
        for name, param in clean.items():
            value = noisy[name]
            if track_grad and param.requires_grad:
                # Value of the noisy parameter, gradient of the identity into the clean one.
                value = value + (param - param.detach())
                if self._debug_backward:
                    value.register_hook(self._backward_message(name))
            replacement[name] = value
        self._swapped = clean
        for module, attr, name in self._slots:
            parameter_slots(module)[attr] = replacement[name]

    def _restore(self) -> None:
        if self._swapped is None:
            return
        for module, attr, name in self._slots:
            parameter_slots(module)[attr] = self._swapped[name]
        self._swapped = None

    def _backward_message(self, name: str) -> Callable[[torch.Tensor], None]:
        model_name = type(self.model).__name__

        def hook(_grad: torch.Tensor) -> None:
            print(
                f"perturb_model: backward pass reached perturbed parameter {name!r} of "
                f"{model_name}; its gradient goes to the clean parameter"
            )

        return hook


def perturb_model(
    model: nn.Module,
    perturb_switch: Switch,
    reset_switch: Switch,
    distance_func: Callable[[Any, Any], float] = _rms_distance,
    desired_action_stddev: float = 0.5,
    noise_generator: Any = NormalNoiseGen,
    noise_generator_args: Tuple = (),
    noise_generator_kwargs: Optional[Dict[str, Any]] = None,
    noise_generate_function: Optional[Callable[..., torch.Tensor]] = None,
    debug_backward: bool = False,
) -> ModelPerturbation:
    """Perturb the parameters of a model during its forward passes.

    Every tensor listed by ``model.named_parameters()`` when this function is called is
    perturbed (buffers are not); tied parameters get the same noise. The switches are
    read at every forward pass of ``model``:

    * ``perturb_switch`` off: the clean parameters are used;
    * ``perturb_switch`` on and ``reset_switch`` on: a fresh noise set is drawn for this
      forward pass;
    * ``perturb_switch`` on and ``reset_switch`` off: the last noisy parameters are used
      again, unchanged even if training has moved the clean parameters since (a noise set
      is drawn if there is none yet).

    The noise standard deviation starts at 0.1 and adapts towards
    ``desired_action_stddev`` through an :class:`AdaptiveParamNoise`: at the first clean
    forward pass after a noise set was drawn, the model is run a second time on the same
    inputs with that noise set (under ``torch.no_grad()``), and
    ``distance_func(clean_output, noisy_output)`` drives one adaptation step. Run the
    model clean now and then (e.g. once per episode) so that adaptation happens.

    Parameters hold their clean values outside forward passes. A backward pass through a
    noisy output computes the gradients at the noisy parameters and accumulates them into
    the clean ones, so an optimizer step updates the clean weights and never leaves noise
    in them; no backward hook has to swap anything (``debug_backward`` adds one that only
    prints). The hooks sit on ``model`` itself: calling one of its submodules directly is
    not perturbed.

    Machin 0.3.4 documented two returned functions (reset and deregister) while its
    example used one ``cancel`` callable; this version returns one callable handle:
    calling it removes every hook, and its ``reset()`` method drops the current noise set.

    Example::

        p_switch, r_switch = Switch(), Switch()
        cancel = perturb_model(actor, p_switch, r_switch)
        p_switch.on(); r_switch.on()
        noisy_action = actor(state)        # exploration with fresh parameter noise
        p_switch.off()
        clean_action = actor(state)        # clean pass, adapts the noise scale
        cancel()                           # the actor is back to normal

    Args:
        model: The model to perturb.
        perturb_switch: Object with ``get() -> bool`` (e.g.
            :class:`machin.utils.helper_classes.Switch`); on enables the noise.
        reset_switch: Object with ``get() -> bool``; on draws fresh noise at every
            perturbed forward pass.
        distance_func: Called as ``distance_func(clean_output, noisy_output)`` and returning
            a float; the default is the root mean square difference of the outputs (of
            their first elements if the model returns a tuple).
        desired_action_stddev: Target distance between noisy and clean outputs.
        noise_generator: Class called once per parameter as
            ``noise_generator(shape, *noise_generator_args, **noise_generator_kwargs)``,
            whose instances return unit-scale noise from ``gen(device)``; the noise is
            multiplied by the current standard deviation.
        noise_generator_args: Extra positional arguments of ``noise_generator``.
        noise_generator_kwargs: Extra keyword arguments of ``noise_generator``.
        noise_generate_function: Alternative to ``noise_generator``: called as
            ``noise_generate_function(shape, device, std)`` and returning the (already
            scaled) noise of a parameter.
        debug_backward: Print a message when a backward pass reaches a perturbed
            parameter.

    Returns:
        A :class:`ModelPerturbation`; call it to remove the hooks, call its ``reset()`` to
        drop the current noise set, read ``adaptive_noise.get_dev()`` for the current
        standard deviation.

    Warns:
        ExtraArgumentsWarning: ``noise_generate_function`` is given together with a
            non-default ``noise_generator`` or its arguments, which are then ignored (as in
            Machin 0.3.4).
        UserWarning: ``model`` has no parameters, so the perturbation does nothing.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``, a switch has no ``get()``, or a
            function argument is not callable.
        ValueError: ``desired_action_stddev`` is negative or not finite.
        RuntimeError: ``model`` is already perturbed by a handle that was not cancelled.
    """
    _check_perturb_arguments(model, perturb_switch, reset_switch, distance_func)
    adaptive_noise = AdaptiveParamNoise(desired_action_stddev=desired_action_stddev)
    make_noise, reset_noise = _noise_source(
        model,
        noise_generator,
        noise_generator_args,
        noise_generator_kwargs,
        noise_generate_function,
    )
    return ModelPerturbation(
        model,
        perturb_switch,
        reset_switch,
        distance_func,
        adaptive_noise,
        make_noise,
        reset_noise,
        debug_backward,
    )


def _check_perturb_arguments(
    model: Any, perturb_switch: Any, reset_switch: Any, distance_func: Any
) -> None:
    """The argument checks of :func:`perturb_model`: types, an empty model (a warning), a second perturbation."""
    name = "perturb_model"
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{name}: model must be a torch.nn.Module, got {model!r} ({type(model).__name__})"
        )
    for arg, switch in (("perturb_switch", perturb_switch), ("reset_switch", reset_switch)):
        if not callable(getattr(switch, "get", None)):
            raise TypeError(
                f"{name}: {arg} must have a get() -> bool method (e.g. a Switch), "
                f"got {switch!r} ({type(switch).__name__})"
            )
    if not callable(distance_func):
        raise TypeError(f"{name}: distance_func must be callable, got {distance_func!r}")
    if not any(True for _ in model.parameters()):
        warnings.warn(
            f"{name}: model {type(model).__name__} has no parameters to perturb; its outputs stay clean",
            UserWarning,
            stacklevel=3,
        )
    if any(
        isinstance(getattr(hook, "__self__", None), ModelPerturbation)
        for hook in forward_pre_hooks(model)
    ):
        raise RuntimeError(
            f"{name}: model {type(model).__name__} is already perturbed; call the handle "
            f"returned by the first perturb_model to cancel it before perturbing again"
        )


def _noise_source(
    model: nn.Module,
    noise_generator: Any,
    noise_generator_args: Tuple,
    noise_generator_kwargs: Optional[Dict[str, Any]],
    noise_generate_function: Optional[Callable[..., torch.Tensor]],
) -> Tuple[Callable[[str, torch.Tensor, float], torch.Tensor], Callable[[], None]]:
    """Build ``make_noise(name, param, std)`` and ``reset_noise()`` for perturb_model."""
    name = "perturb_model"
    if noise_generate_function is not None:
        if not callable(noise_generate_function):
            raise TypeError(
                f"{name}: noise_generate_function must be callable or None, "
                f"got {noise_generate_function!r}"
            )
        if (
            noise_generator is not NormalNoiseGen
            or tuple(noise_generator_args)
            or noise_generator_kwargs
        ):
            warnings.warn(
                f"{name}: noise_generate_function excludes noise_generator, "
                f"noise_generator_args and noise_generator_kwargs, which are ignored; got "
                f"noise_generator={noise_generator!r}, "
                f"noise_generator_args={noise_generator_args!r}, "
                f"noise_generator_kwargs={noise_generator_kwargs!r}",
                ExtraArgumentsWarning,
                stacklevel=3,
            )

        def make_function_noise(_name: str, param: torch.Tensor, std: float) -> torch.Tensor:
            return noise_generate_function(param.shape, param.device, std)

        return make_function_noise, lambda: None

    if not callable(noise_generator):
        raise TypeError(f"{name}: noise_generator must be a class, got {noise_generator!r}")
    args, kwargs = tuple(noise_generator_args), dict(noise_generator_kwargs or {})
    # One generator per parameter (stateful generators keep one state each), built now so
    # that bad arguments fail here, and re-built if the parameter changes shape.
    shapes = {n: p.shape for n, p in model.named_parameters()}
    generators = {n: noise_generator(shape, *args, **kwargs) for n, shape in shapes.items()}

    def make_generator_noise(param_name: str, param: torch.Tensor, std: float) -> torch.Tensor:
        if shapes.get(param_name) != param.shape:
            shapes[param_name] = param.shape
            generators[param_name] = noise_generator(param.shape, *args, **kwargs)
        return generators[param_name](param.device) * std

    def reset_generators() -> None:
        for generator in generators.values():
            generator.reset()

    return make_generator_noise, reset_generators
