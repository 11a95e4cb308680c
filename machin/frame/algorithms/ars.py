"""Augmented Random Search (ARS): policy search by antithetic parameter perturbations.

ARS (Mania, Guy and Recht, 2018) needs no gradient of the policy. Each round draws
``rollout_num`` directions ``delta_k`` (Gaussian, standard deviation
``noise_std_dev``), plays the policy with parameters ``theta + delta_k`` and
``theta - delta_k``, keeps the ``used_rollout_num`` directions whose better return
is highest, and moves ``theta`` along the directions weighted by the return
differences, divided by the standard deviation of the kept returns::

    step = mean_k (r_k+ - r_k-) * delta_k / std(kept returns)

The rollouts of a round are split between the members of an RPC group. Directions
are slices of a long noise table that every process rebuilds from ``noise_seed``
(:class:`NoiseTable`), so only the start index of each slice travels. States are
normalised with running statistics (:class:`MeanStdFilter`) that the group merges
after every round. The first member of the group (the *manager*) collects the
returns and the statistics, takes the optimizer step and pushes the actor to a
:class:`~machin.parallel.server.PushPullModelServer`; the others pull it back.
"""

from __future__ import annotations

import copy
import itertools
import math
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from ...parallel.distributed.roles import Roles
from ...parallel.distributed.rpc_group import RpcGroup
from ...parallel.exception import ValueAssertionError
from ...parallel.server import PushPullModelServer
from ...utils.compat import ignores_extra_args, warn_caller
from ..helpers.servers import build_from_roles
from ..noise.noise_table import NoiseTable, SharedNoiseSampler
from ..normalization import MeanStdFilter, RunningStat
from . import options as _o
from .base import TorchFramework
from .options import Option, non_negative, non_negative_int, positive_int
from .utils import first_model_server, safe_call

__all__ = ["ARS", "RunningStat", "MeanStdFilter", "SharedNoiseSampler", "NoiseTable"]


class _MissingRewards(RuntimeError, AssertionError):
    """:meth:`ARS.update` before every perturbed actor has a reward (0.3.4 asserted it)."""


# Instances built on each group, counted the same way in every member (all build together).
_instances: Dict[str, itertools.count] = {}


class ARS(TorchFramework):
    """Augmented Random Search over the members of an RPC group.

    Every member builds an ``ARS`` with the same arguments. Rollouts (pairs of actors
    perturbed by ``+delta`` and ``-delta``) are split evenly between the members in
    member order; :meth:`get_actor_types` names those of the current process. A round
    is: for each actor type, play it (:meth:`act`) and store its return
    (:meth:`store_reward`); then every member calls :meth:`update`, which blocks until
    all members are there, lets the first member step the actor, and gives every member
    the new actor, new state statistics and new perturbations.

    The actor is any ``nn.Module``; :meth:`act` calls it through
    :func:`~machin.frame.algorithms.utils.safe_call` (state keys name ``forward``
    arguments) and returns what it returns, without gradients.

    Args:
        actor: Policy network.
        optimizer: Optimizer class, built as ``optimizer(actor.parameters(), lr=learning_rate)``.
        ars_group: RPC group of all processes running this ARS; its first member is the manager.
        model_server: Tuple whose first element is the
            :class:`~machin.parallel.server.PushPullModelServer` accessor that carries the
            actor from the manager to the others (from
            :func:`~machin.frame.helpers.servers.model_server_helper`; further elements are
            ignored, as in Machin 0.3.4).

    The keyword options are listed with their defaults in the constructor's
    documentation below (the scheduler takes one entry, for the actor's optimizer).

    Raises:
        ValueError: When an option is out of range (``used_rollout_num > rollout_num``
            is also an ``AssertionError``, as in 0.3.4), ``noise_size`` is too small
            for the actor, ``model_server`` holds no accessor, or the current process is
            not a member of ``ars_group``.
        RuntimeError: When the model server refuses the manager's actor.
    """

    _is_top = ["actor"]
    _is_restorable = ["actor"]

    learning_rate = Option(
        0.01,
        _o.positive,
        "Learning rate of the optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    _learning_rate_of = {"learning_rate": ("actor_optim",)}
    gradient_max = TorchFramework.gradient_max.but(
        doc="Maximum norm of the update direction (``inf``: no clipping)."
    )
    noise_std_dev = Option(0.02, _o.positive, "Standard deviation of the perturbations.")
    noise_size = Option(
        250000000,
        positive_int,
        "Length of the shared noise table (at least the actor's parameter count).",
    )
    rollout_num = Option(32, positive_int, "Directions drawn per round, over the whole group.")
    used_rollout_num = Option(
        32, positive_int, "Directions used for the step: those with the best return."
    )
    normalize_state = Option(
        True,
        lambda _, v: bool(v),
        "Normalise every floating-point state tensor with running statistics.",
    )
    noise_seed = Option(12345, non_negative_int, "Seed of the noise table.")
    sample_seed = Option(
        123,
        non_negative_int,
        "Base seed of the start indices (rollout ``i`` uses ``sample_seed + i``).",
    )

    def __init__(
        self,
        actor: nn.Module,
        optimizer: Callable,
        ars_group: RpcGroup,
        model_server: Tuple[PushPullModelServer],
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        rollout_num, used_rollout_num, noise_size = (
            self.rollout_num,
            self.used_rollout_num,
            self.noise_size,
        )
        if used_rollout_num > rollout_num:
            raise ValueAssertionError(
                f"used_rollout_num must be at most rollout_num, got used_rollout_num={used_rollout_num} "
                f"and rollout_num={rollout_num}"
            )
        param_num = sum(p.numel() for p in actor.parameters())
        if param_num > noise_size:
            raise ValueError(
                f"Noise size {noise_size} is too small compared to the {param_num} parameters of the actor: "
                f"noise_size must be at least the parameter count (ten times it or more is better)"
            )
        if param_num * 10 > noise_size:
            warn_caller(
                f"The actor has {param_num} parameters, more than 1/10 of the noise size {noise_size}: "
                f"perturbations overlap a lot; consider increasing noise_size."
            )
        server = first_model_server(model_server, "ARS")
        members, me = ars_group.get_group_members(), ars_group.get_cur_name()
        if me not in members:
            raise ValueError(f"the current process {me!r} is not a member of ars_group {members}")

        self.actor = actor
        self.actor_optim = self._make_optimizer(optimizer, actor, self.learning_rate)
        self.ars_group = ars_group
        self.model_server = (server,)
        self.actor_model_server = server
        self.grad_max = self.gradient_max
        self.filter: Dict[str, MeanStdFilter] = {}

        # Rollouts [local_rollout_min, local_rollout_min + local_rollout_num) are played here.
        segment = math.ceil(rollout_num / len(members))
        self.local_rollout_min = min(members.index(me) * segment, rollout_num)
        self.local_rollout_num = min(segment, rollout_num - self.local_rollout_min)
        self._local_rollouts = range(
            self.local_rollout_min, self.local_rollout_min + self.local_rollout_num
        )
        self._manager = members[0]
        self._is_manager = me == self._manager

        self._param_num = param_num
        self.noise_array = NoiseTable(noise_size, self.noise_std_dev, self.noise_seed)
        self.noise_sampler = {
            r: SharedNoiseSampler(self.noise_array, self.sample_seed + r)
            for r in self._local_rollouts
        }
        # One perturbed copy of the actor per local rollout and sign, made once, rewritten every round.
        self.actor_with_delta: Dict[Tuple[int, bool], nn.Module] = {}
        for r, positive in itertools.product(self._local_rollouts, (False, True)):
            perturbed = copy.deepcopy(actor)
            perturbed.requires_grad_(False)
            self.actor_with_delta[(r, positive)] = perturbed
        self.delta_idx: Dict[int, int] = {}
        self.reward: Dict[int, Tuple[List[float], List[float]]] = {}
        self._round = 0

        # The manager receives each round's results through a service of the group.
        counter = _instances.setdefault(ars_group.get_group_name(), itertools.count())
        self._service = f"ars/{next(counter)}"
        self._inbox: Dict[str, Tuple[int, Any]] = {}
        self._published: Any = None
        self._inbox_lock = threading.Lock()
        if self._is_manager:
            ars_group.register(self._service + "/submit", self._receive)
            ars_group.register(self._service + "/fetch", self._send)

        self._sync_actor()
        self._draw_perturbations()
        self._reset_rewards()

    def _optimizers(self):
        return [self.actor_optim]

    @classmethod
    def from_roles(cls, roles: Roles, *args: Any, group_name: str = "ars", **kwargs: Any) -> ARS:
        """Build ARS, its group and its model server from the roles of the processes.

        Every process of the world calls it with the same arguments (and its own
        ``roles``): the constructor's arguments without ``ars_group`` and
        ``model_server``. ARS has no learner/sampler split: **every** process plays its
        share of the rollouts, and the group (the whole world) is ordered so that
        ``roles.coordinator`` (the first learner) is the manager that takes the optimizer
        steps; the model server lives on ``roles.model_server``. Every process must call
        :meth:`update` each round, so a run cannot lose a process.

        Args:
            roles: This process's :class:`~machin.parallel.distributed.roles.Roles`.
            args: The constructor's positional arguments (the actor and the optimizer).
            group_name: Name of the RPC group.
            kwargs: The constructor's keyword options.
        """
        return build_from_roles(cls, roles, args, kwargs, group_name=group_name)

    # -- acting ---------------------------------------------------------------------------
    def get_actor_types(self) -> List[str]:
        """Names of the actors the current process must play this round.

        ``"negative_<i>"`` and ``"positive_<i>"`` for each local rollout ``i``, in that order.
        """
        return [
            f"{'positive' if positive else 'negative'}_{r}" for r, positive in self.actor_with_delta
        ]

    def _parse(self, actor_type: Any, allow_original: bool) -> Optional[Tuple[int, bool]]:
        """The key ``(rollout index, positive)`` of an actor type; ``None`` for ``"original"``."""
        if allow_original and actor_type == "original":
            return None
        sign, _, index = actor_type.partition("_") if isinstance(actor_type, str) else ("", "", "")
        key = (
            (int(index), sign == "positive")
            if sign in ("positive", "negative") and index.isdigit()
            else None
        )
        if key in self.actor_with_delta:
            return key
        options = (['"original"'] if allow_original else []) + [
            f'"{t}"' for t in self.get_actor_types()
        ]
        raise ValueError(
            f"Invalid parameter type: actor_type {actor_type!r} is not an actor of this process; "
            f"available options are: {', '.join(options)}"
        )

    def _normalize(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """A new state dict with every floating-point tensor normalised (and counted by its filter)."""
        normalized = {}
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                state_filter = self.filter.get(key)
                if state_filter is None:
                    state_filter = self.filter[key] = MeanStdFilter(value.shape[1:])
                value = state_filter.filter(value).to(dtype=value.dtype, device=value.device)
            normalized[key] = value
        return normalized

    @ignores_extra_args
    def act(self, state: Dict[str, Any], actor_type: str) -> Any:
        """Run the original actor or one of the perturbed actors of this process.

        With ``normalize_state``, floating-point state tensors are normalised first
        (their statistics grow with every call; the normalisation itself changes only
        in :meth:`update`). The input dict is not modified.

        Args:
            state: State dict ``{key: [B, ...]}``; keys name arguments of ``forward``.
            actor_type: ``"original"`` or one of :meth:`get_actor_types`.

        Returns:
            Whatever the actor returns (computed without gradients).

        Raises:
            ValueError: When ``actor_type`` is not ``"original"`` or an actor of this process.
        """
        self._check_state(state)
        key = self._parse(actor_type, allow_original=True)
        actor = self.actor if key is None else self.actor_with_delta[key]
        if self.normalize_state:
            state = self._normalize(state)
        with torch.no_grad():
            return safe_call(actor, state)

    @ignores_extra_args
    def store_reward(self, reward: float, actor_type: str) -> None:
        """Store the return of one episode played by a perturbed actor.

        Several returns for the same actor type are averaged by :meth:`update`.

        Args:
            reward: The return (a number or a one-element tensor).
            actor_type: One of :meth:`get_actor_types`.

        Raises:
            ValueError: When ``actor_type`` is not a perturbed actor of this process
                (``"original"`` included), or ``reward`` is not finite.
        """
        index, positive = self._parse(actor_type, allow_original=False)
        value = float(reward)
        if not math.isfinite(value):
            raise ValueError(f"reward must be finite, got {reward!r} for actor type {actor_type!r}")
        self.reward[index][positive].append(value)

    # -- training -------------------------------------------------------------------------
    def update(self) -> float:
        """Finish the round: step the actor, merge the state statistics, draw new perturbations.

        Every member of ``ars_group`` must call it (it waits for all of them, within
        the world's ``rpc_timeout``), after storing a return for each of its actor types.

        Returns:
            The mean return of all the group's perturbed actors in this round (the same
            number in every process; Machin 0.3.4 returned nothing).

        Raises:
            RuntimeError: (also an ``AssertionError``) when an actor type of this
                process has no stored return.
        """
        missing = [
            t
            for t, (r, positive) in zip(self.get_actor_types(), self.actor_with_delta)
            if not self.reward[r][positive]
        ]
        if missing:
            raise _MissingRewards(
                f"You must store rewards for parameters with positive noise delta and negative noise delta: "
                f"no reward was stored for {missing}"
            )
        rollouts = list(self._local_rollouts)
        result = (
            rollouts,
            [float(np.mean(self.reward[r][1])) for r in rollouts],
            [float(np.mean(self.reward[r][0])) for r in rollouts],
            [self.delta_idx[r] for r in rollouts],
            {k: f.rs_local for k, f in self.filter.items()} if self.normalize_state else {},
        )
        group, me = self.ars_group, self.ars_group.get_cur_name()
        if self._is_manager:
            self._receive(self._round, me, result)
        else:
            group.registered_sync(self._service + "/submit", args=(self._round, me, result))
        group.barrier()  # every result is in the manager's inbox
        if self._is_manager:
            self._published = self._learn()
            self._push_actor()
        group.barrier()  # the new actor and statistics are published
        if self._is_manager:
            mean_return, statistics = self._published
        else:
            mean_return, statistics = group.registered_sync(self._service + "/fetch")
            if not self.actor_model_server.pull(self.actor):
                raise RuntimeError(
                    "Pull failed: the model server holds no actor; did the manager push it?"
                )
        if self.normalize_state:
            self._apply_statistics(statistics)
        self._round += 1
        self._draw_perturbations()
        self._reset_rewards()
        return mean_return

    def _receive(self, round_index: int, member: str, result: Any) -> None:
        """(Manager) store a member's results of a round."""
        with self._inbox_lock:
            self._inbox[member] = (round_index, result)

    def _send(self) -> Any:
        """(Manager) the mean return and state statistics published by the last update."""
        return self._published

    def _learn(self) -> Tuple[float, Dict[str, RunningStat]]:
        """(Manager) one optimizer step from every member's results; returns what is published."""
        with self._inbox_lock:
            inbox, self._inbox = self._inbox, {}
        late = [
            m for m in self.ars_group.get_group_members() if inbox.get(m, (None,))[0] != self._round
        ]
        if late:
            raise RuntimeError(f"ARS round {self._round}: no results from member(s) {late}")
        results = [inbox[m][1] for m in self.ars_group.get_group_members()]
        order = np.argsort(np.concatenate([r[0] for r in results]), kind="stable")
        pos = np.concatenate([r[1] for r in results])[order]
        neg = np.concatenate([r[2] for r in results])[order]
        idx = np.concatenate([r[3] for r in results]).astype(np.int64)[order]
        mean_return = float(np.concatenate([pos, neg]).mean())

        # keep the directions whose better return is highest
        if self.used_rollout_num < self.rollout_num:
            best = np.maximum(pos, neg)
            keep = np.sort(np.argsort(-best, kind="stable")[: self.used_rollout_num])
            pos, neg, idx = pos[keep], neg[keep], idx[keep]
        spread = np.concatenate([pos, neg]).std()
        weights = (neg - pos) / (spread if not np.isclose(spread, 0.0) else 1.0)
        deltas = torch.stack([self.noise_array[i : i + self._param_num] for i in idx.tolist()])
        # SGD subtracts the gradient: (r- - r+) * delta points against the improvement
        direction = torch.from_numpy(weights) @ deltas / len(idx)
        params = list(self.actor.parameters())
        grads = [
            g.view_as(p).to(p.dtype)
            for g, p in zip(direction.split([p.numel() for p in params]), params)
        ]
        with torch.enable_grad():
            # a surrogate whose gradient is the direction: the one optimizer step of the base class applies it
            surrogate = sum((p * g.to(p.device)).sum() for p, g in zip(params, grads))
            self._optimize(surrogate, self.actor_optim, self.actor, self.grad_max)

        statistics: Dict[str, RunningStat] = {}
        if self.normalize_state:
            for member, result in zip(self.ars_group.get_group_members(), results):
                if member == self._manager:
                    continue  # its samples are already in its own filters' rs
                for key, local in result[4].items():
                    if key not in self.filter:
                        self.filter[key] = MeanStdFilter(local.shape)
                    self.filter[key].rs.update(local)
            # a snapshot: the manager's filters go on counting while the others fetch it
            statistics = {k: f.rs.copy() for k, f in self.filter.items()}
        return mean_return, statistics

    def _apply_statistics(self, statistics: Dict[str, RunningStat]) -> None:
        """Adopt the merged statistics of the group and normalise with them from now on."""
        for key, merged in statistics.items():
            if key not in self.filter:
                self.filter[key] = MeanStdFilter(merged.shape)
            state_filter = self.filter[key]
            if not self._is_manager:
                state_filter.rs = merged.copy()
            state_filter.clear_local()
            state_filter.apply_stats()

    def _push_actor(self) -> None:
        if not self.actor_model_server.push(self.actor, pull_on_fail=False):
            raise RuntimeError(
                "Push failed: the model server refused the manager's actor because it holds a newer "
                "version (give each ARS its own model server)"
            )

    def _sync_actor(self) -> None:
        """Give every member the manager's actor."""
        if self._is_manager:
            self._push_actor()
        self.ars_group.barrier()
        if not self._is_manager and not self.actor_model_server.pull(self.actor):
            raise RuntimeError(
                "Pull failed: the model server holds no actor; did the manager push it?"
            )

    def _draw_perturbations(self, redraw: bool = True) -> None:
        """Write ``actor + delta`` and ``actor - delta`` into the perturbed copies of each local rollout.

        Args:
            redraw: Draw new directions (a new round); ``False`` keeps the current ones.
        """
        params = [p.detach() for p in self.actor.parameters()]
        sizes = [p.numel() for p in params]
        with torch.no_grad():
            for r in self._local_rollouts:
                if redraw:
                    self.delta_idx[r] = self.noise_sampler[r].sample(self._param_num)[0]
                start = self.delta_idx[r]
                deltas = self.noise_array[start : start + self._param_num].split(sizes)
                for positive in (False, True):
                    copies = self.actor_with_delta[(r, positive)].parameters()
                    for target, base, delta in zip(copies, params, deltas):
                        delta = delta.view_as(base).to(dtype=base.dtype, device=base.device)
                        torch.add(base, delta, alpha=1 if positive else -1, out=target.data)

    def _reset_rewards(self) -> None:
        self.reward = {r: ([], []) for r in self._local_rollouts}

    # -- checkpoints ----------------------------------------------------------------------
    def _filter_name(self, network_map: Optional[Dict[str, str]]) -> str:
        return f"{self._file_names(network_map)['actor']}_state_filter"

    # The state statistics are saved with the actor, as part of the same version (one
    # manifest), through the base class's extra-file hooks.
    def save(
        self, model_dir: str, network_map: Optional[Dict[str, str]] = None, version: int = 0
    ) -> None:
        """Write the actor (``<model_dir>/actor_<version>.pt``) and the state statistics.

        With ``normalize_state``, the statistics (the running estimate and the
        normalisation in use) go to ``actor_state_filter_<version>.pt`` (named after
        the actor's file), so a loaded actor normalises states as the saved one did.
        Both files belong to the same version (one manifest, see
        :meth:`TorchFramework.save`). In a group, save from one process (usually the manager).

        Args:
            model_dir: Directory to write to (created if missing).
            network_map: ``{"actor": file name}`` to write the actor under another name.
            version: Version number in the file names.
        """
        super().save(model_dir, network_map, version)

    def load(
        self,
        model_dir: str,
        network_map: Optional[Dict[str, str]] = None,
        version: int = -1,
        **kwargs: Any,
    ) -> None:
        """Load the actor (see :meth:`TorchFramework.load`) and, when saved with it, the state statistics.

        The statistics file is read and checked with the actor's file, before anything
        changes. The perturbed actors are rebuilt around the loaded actor.
        """
        super().load(model_dir, network_map, version, **kwargs)

    def _extra_checkpoint_names(self, network_map: Optional[Dict[str, str]]) -> List[str]:
        return [self._filter_name(network_map)] if self.normalize_state else []

    def _extra_checkpoint_state(self, network_map: Optional[Dict[str, str]]) -> Dict[str, Any]:
        if not (self.normalize_state and self.filter):
            return {}
        state = {
            key: {
                "n": torch.tensor(f.rs.n),
                "mean": f.rs.mean,
                "var_sum": torch.from_numpy(f.rs._S),
                "used_mean": f.mean,
                "used_std": f.std,
            }
            for key, f in self.filter.items()
        }
        return {self._filter_name(network_map): state}

    def _load_extra_checkpoint_state(
        self, network_map: Optional[Dict[str, str]], states: Dict[str, Any]
    ) -> None:
        state = states.get(self._filter_name(network_map)) if self.normalize_state else None
        if state is None:
            return
        self.filter = {}
        for key, saved in state.items():
            state_filter = self.filter[key] = MeanStdFilter(saved["mean"].shape)
            state_filter.rs._n = int(saved["n"])
            state_filter.rs._M = saved["mean"].to(torch.float64).numpy()
            state_filter.rs._S = saved["var_sum"].to(torch.float64).numpy()
            state_filter.mean = saved["used_mean"].to(torch.float64)
            state_filter.std = saved["used_std"].to(torch.float64)

    def _post_load(self) -> None:
        """Rebuild the perturbed actors around the loaded actor, with this round's directions."""
        self._draw_perturbations(redraw=False)
