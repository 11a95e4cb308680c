"""The base class of every algorithm: saving, loading, optimizer steps, schedulers, graphs."""

from __future__ import annotations

import math
import os
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...utils.compat import warn_caller
from ...utils.logging import default_logger
from ..buffers import Buffer

__all__ = ["TorchFramework", "pack_result"]

_MODE_SENSITIVE_LAYERS = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)
_mode_sensitivity: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


def _mode_sensitive(network: nn.Module) -> bool:
    """Whether ``train()`` / ``eval()`` changes what ``network`` computes (remembered per network)."""
    known = _mode_sensitivity.get(network)
    if known is None:
        known = _mode_sensitivity[network] = any(
            isinstance(m, _MODE_SENSITIVE_LAYERS) or getattr(m, "mode_sensitive", False) for m in network.modules()
        )
    return known


def pack_result(main: Union[Any, Tuple[Any, ...]], extras: Sequence[Any] = ()) -> Any:
    """Return ``main`` bare when there is nothing else, else a tuple of ``main`` then ``extras``.

    Implements the result-wrapping rule of every ``act*`` method: one result comes
    back bare, several come back as a tuple with the network's extra outputs last.
    """
    main = main if isinstance(main, tuple) else (main,)
    result = main + tuple(extras)
    return result[0] if len(result) == 1 else result


def split_output(output: Any) -> Tuple[Any, Tuple[Any, ...]]:
    """Split a network output into its first value and the extra outputs after it."""
    if isinstance(output, tuple):
        return output[0], output[1:]
    return output, ()


class TorchFramework:
    """Base class of all algorithms.

    Subclasses list their networks in two class attributes: ``_is_top`` (every
    network the algorithm holds) and ``_is_restorable`` (the networks written by
    :meth:`save` and read by :meth:`load`). The base class owns the single place
    where a loss becomes an optimizer step (:meth:`_optimize`), the learning-rate
    schedulers, checkpoint files and the optional autograd-graph drawings.

    Args:
        visualize: Draw the autograd graph of each loss on its first update.
        visualize_dir: Directory the drawings are written to.
    """

    _is_top: List[str] = []
    _is_restorable: List[str] = []

    def __init__(self, *, visualize: bool = False, visualize_dir: str = ""):
        self.visualize = visualize
        self.visualize_dir = visualize_dir
        self._visualized: set = set()
        self._lr_schedulers: List[Any] = []
        self._backward: Callable[[torch.Tensor], None] = torch.autograd.backward

    # -- class-level descriptions ---------------------------------------------------
    @classmethod
    def get_top(cls) -> List[str]:
        """Names of every network attribute of the algorithm."""
        return list(cls._is_top)

    @classmethod
    def get_restorable(cls) -> List[str]:
        """Names of the networks that :meth:`save` writes and :meth:`load` reads."""
        return list(cls._is_restorable)

    def _networks(self, names: Iterable[str]) -> Dict[str, nn.Module]:
        return {name: getattr(self, name) for name in names}

    # -- construction helpers -------------------------------------------------------
    @staticmethod
    def _check_positive(**values: float) -> None:
        for name, value in values.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")

    @staticmethod
    def _make_optimizer(optimizer: Callable, network: Union[nn.Module, Iterable], learning_rate: float):
        params = network.parameters() if isinstance(network, nn.Module) else network
        return optimizer(params, lr=learning_rate)

    def _init_lr_schedulers(self, lr_scheduler: Optional[Callable], lr_scheduler_args: Optional[Sequence],
                            lr_scheduler_kwargs: Optional[Sequence], optimizers: Sequence[Any]) -> None:
        """Create one scheduler per optimizer: ``lr_scheduler(opt_i, *args[i], **kwargs[i])``."""
        count = len(optimizers)
        if lr_scheduler is None:
            return
        args = lr_scheduler_args or ((),) * count
        kwargs = lr_scheduler_kwargs or ({},) * count
        if len(args) != count or not all(isinstance(a, (tuple, list)) for a in args):
            raise ValueError(
                f"lr_scheduler_args must hold one tuple of arguments per optimizer ({count} here), "
                f"e.g. ((lr_func,),) for one optimizer; got {lr_scheduler_args!r}"
            )
        if len(kwargs) != count or not all(isinstance(k, dict) for k in kwargs):
            raise ValueError(
                f"lr_scheduler_kwargs must hold one dict per optimizer ({count} here), got {lr_scheduler_kwargs!r}"
            )
        self._lr_schedulers = [lr_scheduler(opt, *a, **k) for opt, a, k in zip(optimizers, args, kwargs)]

    @staticmethod
    def _make_buffer(replay_buffer: Optional[Buffer], factory: Callable[[], Buffer]) -> Buffer:
        return factory() if replay_buffer is None else replay_buffer

    # -- training plumbing ----------------------------------------------------------
    def _optimize(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                  parameters: Union[nn.Module, Iterable[torch.Tensor]], gradient_max: float = math.inf) -> None:
        """The one place where a loss becomes a step: zero grads, backward, clip, step."""
        optimizer.zero_grad(set_to_none=True)
        self._backward(loss)
        if gradient_max != math.inf:
            params = parameters.parameters() if isinstance(parameters, nn.Module) else parameters
            nn.utils.clip_grad_norm_(params, gradient_max)
        optimizer.step()

    @staticmethod
    def _set_mode(training: bool, *networks: nn.Module) -> None:
        """Switch networks to training or evaluation mode.

        Only networks with layers that behave differently in the two modes (dropout,
        batch norm, instance norm with running statistics, or any module declaring
        ``mode_sensitive = True``)
        are switched, since ``train()`` walks every submodule.
        """
        for network in networks:
            if network.training != training and _mode_sensitive(network):
                network.train(training)

    def set_backward_function(self, backward_func: Callable[[torch.Tensor], None]) -> None:
        """Replace ``torch.autograd.backward`` (e.g. with a gradient scaler's or accelerator's).

        Args:
            backward_func: Called as ``backward_func(loss)`` instead of ``loss.backward()`` in every optimizer step.
        """
        self._backward = backward_func

    def update_lr_scheduler(self) -> None:
        """Step every learning-rate scheduler once (call after an update)."""
        for scheduler in self._lr_schedulers:
            scheduler.step()

    def _maybe_visualize(self, final_tensor: torch.Tensor, name: str) -> None:
        if self.visualize and name not in self._visualized:
            self.visualize_model(final_tensor, name, self.visualize_dir)

    def visualize_model(self, final_tensor: torch.Tensor, name: str, directory: str) -> None:
        """Write the autograd graph ending at ``final_tensor`` once per ``name``.

        Args:
            final_tensor: The tensor (a loss) whose graph is drawn.
            name: Name of the graph; a name is drawn only once.
            directory: Directory that receives ``<name>/`` with the drawing.
        """
        if name in self._visualized:
            return
        from ...utils.visualize import visualize_graph

        self._visualized.add(name)
        visualize_graph(final_tensor, visualize_dir=os.path.join(directory, name), exit_after_vis=False)

    def enable_multiprocessing(self) -> None:
        """Move every network of ``_is_top`` to shared memory (for process-based sharing)."""
        for model in self._networks(self._is_top).values():
            model.share_memory()

    # -- checkpoints ----------------------------------------------------------------
    #: Names a network had in Machin 0.3.4 -> its attribute now (accepted in ``network_map``).
    _restorable_aliases: Dict[str, str] = {}

    def _file_names(self, network_map: Optional[Dict[str, str]]) -> Dict[str, str]:
        """``{attribute: file name}`` of every restorable network."""
        network_map = {self._restorable_aliases.get(k, k): v for k, v in (network_map or {}).items()}
        unknown = sorted(set(network_map) - set(self._is_restorable))
        if unknown:
            # Machin 0.3.4 skipped such names; skip them too, but say so (a typo would lose a network).
            warn_caller(
                f"network_map names {unknown}, which {type(self).__name__} does not save; they are "
                f"ignored. The restorable networks are {self._is_restorable}."
            )
        return {name: network_map.get(name, name) for name in self._is_restorable}

    def save(self, model_dir: str, network_map: Optional[Dict[str, str]] = None, version: int = 0) -> None:
        """Write the ``state_dict`` of every restorable network to ``<model_dir>/<name>_<version>.pt``.

        Args:
            model_dir: Directory to write to (created if missing).
            network_map: Maps a network attribute name to the file name to use.
            version: Version number in the file names.
        """
        from ...utils.prepare import prep_save_state_dict

        if not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be a non-negative integer, got {version!r}")
        os.makedirs(model_dir, exist_ok=True)
        for attr, file_name in self._file_names(network_map).items():
            prep_save_state_dict(os.path.join(model_dir, f"{file_name}_{version}.pt"),
                                 getattr(self, attr).state_dict())

    def load(self, model_dir: str, network_map: Optional[Dict[str, str]] = None, version: int = -1,
             *, trusted: bool = False) -> None:
        """Load the restorable networks from ``model_dir`` into the existing network objects.

        Args:
            model_dir: Directory holding ``<name>_<version>.pt`` files.
            network_map: Maps a network attribute name to its file name.
            version: Version to load; ``-1`` (or a version some network lacks) loads the
                newest version that every network has.
            trusted: Also read files that hold whole pickled modules, as Machin 0.3.4 wrote
                them. Unpickling such a file **can run arbitrary code**: pass ``True`` only
                for files you made yourself or otherwise trust. By default files are read
                with ``weights_only=True`` and must hold state dicts.

        Raises:
            RuntimeError: When the directory is missing or no version is common to all networks.
        """
        from ...utils.prepare import prep_load_model

        names = self._file_names(network_map)
        model_map = {file_name: getattr(self, attr) for attr, file_name in names.items()}
        prep_load_model(model_dir, model_map, version=None if version == -1 else version,
                        logger=default_logger, trusted=trusted)
        self._post_load()

    def _post_load(self) -> None:
        """Hook run after :meth:`load` (e.g. to copy loaded targets into online networks)."""
