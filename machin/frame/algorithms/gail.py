"""Generative adversarial imitation learning (GAIL): an on-policy learner trained to look like an expert.

GAIL learns from demonstrations, with no reward from the environment. A
discriminator ``D(s, a)`` is trained as a classifier that says how likely a
state-action pair is to come from the learner (label 1) rather than from the expert
(label 0). The learner (the *generator*, an :class:`~machin.frame.algorithms.a2c.A2C`,
:class:`~machin.frame.algorithms.ppo.PPO` or :class:`~machin.frame.algorithms.trpo.TRPO`
framework) is then trained with its own update on the reward ``-log D(s, a)``, which is
large where the discriminator takes the learner's behaviour for the expert's.

:meth:`GAIL.store_episode` replaces the reward of every step with that reward (one
batched discriminator call per episode) and hands the episode to the generator.
:meth:`GAIL.update` takes ``discriminator_update_times`` discriminator steps on
``batch_size`` expert pairs and ``batch_size`` learner pairs, then runs the generator's
own update, which empties its buffer. Expert pairs are kept in a buffer of their own
(:meth:`GAIL.store_expert_episode`) for the whole run.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from ..transition import TransitionBase
from .a2c import A2C
from .base import Driver, TorchFramework, split_output
from .config import (
    MODEL_KEYS,
    ConfigError,
    _expect_dict,
    _json_value,
    build_networks,
    resolve_class,
)
from .options import Option, _buffer, non_negative, option_specs, optional, positive, positive_int
from .ppo import PPO
from .trpo import TRPO
from .utils import as_column, safe_call

__all__ = [
    "GAIL",
    "ExpertTransition",
    "GAILResult",
    "binary_cross_entropy",
    "load_expert_trajectories",
]

EXPERT_ATTRS = ("state", "action")
#: Smallest discriminator output used in the reward ``-log D``, so that it stays finite.
MIN_PROBABILITY = 1e-8
#: Generators a config may name in ``constrained_policy_optimization``.
CONFIG_GENERATORS = ("PPO", "TRPO")


class ExpertTransition(TransitionBase):
    """One step of an expert: the ``state`` it saw and the ``action`` it took.

    Both are ``Dict[str, Tensor[1, ...]]`` keyed like the inputs of the discriminator's
    ``forward``; the batch size is 1, as for :class:`~machin.frame.transition.Transition`.

    Args:
        state: The observed state.
        action: The expert's action in that state.

    Raises:
        ValueError: When a value is not a dict of tensors or a tensor's first dimension is not 1.
    """

    _required_batch_size = 1
    state: Dict[str, torch.Tensor] = None
    action: Dict[str, torch.Tensor] = None

    def __init__(self, state: Dict[str, torch.Tensor], action: Dict[str, torch.Tensor]):
        super().__init__(
            major_attr=list(EXPERT_ATTRS),
            sub_attr=[],
            custom_attr=[],
            major_data=[state, action],
            sub_data=[],
            custom_data=[],
        )


class GAILResult(NamedTuple):
    """What :meth:`GAIL.update` returns; unpacks as Machin 0.4's triple.

    ``policy_value`` and ``value_loss`` are what the generator's update returned (its mean
    policy value, minus its policy loss, and its mean critic loss); ``discriminator_loss`` is
    the mean discriminator loss of the update's discriminator steps.
    """

    policy_value: float
    value_loss: float
    discriminator_loss: float


def binary_cross_entropy(probability: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of ``probability`` against ``target``, as ``nn.BCELoss()`` computes it.

    The logarithms are bounded below by -100, as ``nn.BCELoss`` bounds them. Unlike it, a NaN
    in ``probability`` gives a NaN loss instead of an error, so an update on non-finite data
    skips its step (see :meth:`TorchFramework._optimize
    <machin.frame.algorithms.base.TorchFramework._optimize>`) instead of failing.

    Args:
        probability: Predicted probabilities in ``[0, 1]``.
        target: Labels (0 or 1, or probabilities) of the same shape.
    """
    log_p = torch.log(probability).clamp_min(-100.0)
    log_not_p = torch.log1p(-probability).clamp_min(-100.0)
    return -(target * log_p + (1 - target) * log_not_p).mean()


def _check_pair(transition: Any, where: str) -> None:
    """Raise unless ``transition`` is a dict or a transition holding ``state`` and ``action``."""
    if not isinstance(transition, (dict, TransitionBase)):
        raise TypeError(
            f"{where} must be an ExpertTransition, a Transition or a dict with 'state' and "
            f"'action', got {type(transition).__name__}"
        )
    keys = list(transition.keys())
    missing = [name for name in EXPERT_ATTRS if name not in keys]
    if missing:
        raise ValueError(
            f"Transition object missing attributes: {where} is missing required attribute(s) "
            f"{missing}; it has {keys}"
        )


def _as_expert(transition: Any, where: str) -> ExpertTransition:
    """``transition`` (a dict or a transition with ``state`` and ``action``) as an :class:`ExpertTransition`."""
    if isinstance(transition, ExpertTransition):
        return transition
    _check_pair(transition, where)
    return ExpertTransition(transition["state"], transition["action"])


def _with_reward(transition: Union[TransitionBase, Dict[str, Any]], reward: float) -> Any:
    """A copy of ``transition`` whose ``reward`` is ``reward`` (the input is not changed)."""
    if isinstance(transition, dict):
        return {**transition, "reward": reward}
    return TransitionBase(
        transition.major_attr,
        transition.sub_attr,
        transition.custom_attr,
        [getattr(transition, name) for name in transition.major_attr],
        [reward if name == "reward" else getattr(transition, name) for name in transition.sub_attr],
        [getattr(transition, name) for name in transition.custom_attr],
    )


def _concatenated(steps: Sequence[Any], attr: str) -> Dict[str, torch.Tensor]:
    """The ``attr`` dicts of ``steps`` joined into one batch per key."""
    keys = list(steps[0][attr])
    return {key: torch.cat([step[attr][key] for step in steps]) for key in keys}


class GAIL(TorchFramework):
    """GAIL around an on-policy generator (PPO or TRPO, or A2C).

    The discriminator is called as ``discriminator(<state keys>, <action keys>)`` (through
    :func:`~machin.frame.algorithms.utils.safe_call`, so its ``forward`` arguments name the
    keys it reads) and returns the probability ``[B, 1]`` that each pair comes from the
    learner rather than from the expert (use a sigmoid output layer); extra outputs are
    ignored. Its loss is ``discriminator_criterion(D(learner), 1) +
    discriminator_criterion(D(expert), 0)``, binary cross-entropy by default
    (:func:`binary_cross_entropy`; the attribute may be replaced, e.g. by ``nn.BCELoss()``). The generator receives the reward ``-log D(s, a)`` for every step it
    stores, with ``D`` taken no lower than ``1e-8``.

    The generator's networks, optimizers and buffer are also attributes of GAIL
    (``actor``, ``critic``, ``actor_optim``, ``critic_optim``, ``replay_buffer``), as in
    Machin 0.4; everything else of it is reached through
    ``constrained_policy_optimization``. :meth:`save` writes the actor, the critic and the
    discriminator.

    Args:
        discriminator: The discriminator network.
        constrained_policy_optimization: The generator, an :class:`~machin.frame.algorithms.a2c.A2C`
            framework or a subclass (:class:`~machin.frame.algorithms.ppo.PPO`,
            :class:`~machin.frame.algorithms.trpo.TRPO`), built with its own options.
        optimizer: Optimizer class of the discriminator, called as ``optimizer(params, lr=...)``.

    The keyword options are listed with their defaults in the constructor's documentation
    below; ``lr_scheduler`` has one slot, for the discriminator's optimizer (the generator
    keeps its own schedulers, which :meth:`update_lr_scheduler` also steps).

    Raises:
        TypeError: When the generator is not an A2C-family framework or the discriminator
            not a network.
        ValueError: When an option is out of range.
    """

    _is_top = ["actor", "critic", "discriminator"]
    _is_restorable = ["actor", "critic", "discriminator"]
    driver = Driver("act", {}, "act", "episode")

    batch_size = Option(
        100, positive_int, "Expert pairs, and as many learner pairs, per discriminator step."
    )
    discriminator_update_times = Option(1, positive_int, "Discriminator steps per :meth:`update`.")
    discriminator_learning_rate = Option(
        0.001,
        positive,
        "Learning rate of the discriminator optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    expert_replay_size = Option(500000, positive_int, "Capacity of the default expert buffer.")
    expert_replay_device = Option("cpu", doc="Device of the default expert buffer.")
    expert_replay_buffer = Option(
        None,
        optional(_buffer),
        "A buffer for the expert pairs instead of the default one (``expert_replay_size`` and "
        "``expert_replay_device`` are then not used); the attribute holds the buffer in use.",
    )
    _learning_rate_of = {"discriminator_learning_rate": ("discriminator_optim",)}

    def __init__(
        self,
        discriminator: nn.Module,
        constrained_policy_optimization: A2C,
        optimizer: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        if not isinstance(constrained_policy_optimization, A2C):
            raise TypeError(
                "constrained_policy_optimization must be an A2C-family framework (PPO, TRPO or "
                f"A2C), got {type(constrained_policy_optimization).__name__}"
            )
        if not isinstance(discriminator, nn.Module):
            raise TypeError(
                f"discriminator must be a torch.nn.Module, got {type(discriminator).__name__}"
            )
        generator = constrained_policy_optimization
        self.constrained_policy_optimization = generator
        self.actor = generator.actor
        self.critic = generator.critic
        self.actor_optim = generator.actor_optim
        self.critic_optim = generator.critic_optim
        self.replay_buffer = generator.replay_buffer
        self.discriminator = discriminator
        self.discriminator_criterion = binary_cross_entropy
        self.discriminator_optim = self._make_optimizer(
            optimizer, discriminator, self.discriminator_learning_rate
        )
        if self.expert_replay_buffer is None:
            self.expert_replay_buffer = Buffer(self.expert_replay_size, self.expert_replay_device)

    def _optimizers(self) -> List[torch.optim.Optimizer]:
        return [self.discriminator_optim]

    # -- acting -------------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any], *, deterministic: bool = False) -> Any:
        """The generator's action: its actor's output ``(action, log_prob, entropy, *extras)``.

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            deterministic: Ask the actor for its most likely action (see
                :meth:`A2C.act <machin.frame.algorithms.a2c.A2C.act>`).
        """
        return self.constrained_policy_optimization.act(state, deterministic=deterministic)

    def can_act_deterministically(self) -> bool:
        """Whether the generator's actor takes ``deterministic`` (so :meth:`act` can pass it)."""
        return self.constrained_policy_optimization.can_act_deterministically()

    def _discriminate(self, state: Dict[str, Any], action: Dict[str, Any]) -> torch.Tensor:
        """The discriminator's first output for these pairs, with gradient: Machin 0.4's
        overridable helper, through which every discriminator call goes."""
        return split_output(safe_call(self.discriminator, state, action))[0]

    def reward(self, state: Dict[str, Any], action: Dict[str, Any]) -> torch.Tensor:
        """The reward GAIL gives the generator for these pairs: ``-log D(s, a)``, shape ``[B, 1]``.

        Args:
            state: State dict ``{key: [B, ...]}``.
            action: Action dict ``{key: [B, ...]}``.
        """
        with torch.no_grad():
            self._set_mode(False, self.discriminator)
            size = len(next(iter(state.values())))
            probability = as_column(
                self._discriminate(state, action), size, "the discriminator output"
            )
            return -torch.log(probability.clamp_min(MIN_PROBABILITY))

    # -- storing --------------------------------------------------------------------------
    def store_episode(self, episode: List[Union[TransitionBase, Dict[str, Any]]]) -> None:
        """Replace the reward of every step with :meth:`reward`, then store the episode in the generator.

        The steps are those the generator takes (see
        :meth:`A2C.store_episode <machin.frame.algorithms.a2c.A2C.store_episode>`); the
        reward each carries is not used, and the caller's steps are not changed.

        Args:
            episode: The steps, in order (``Transition`` objects or dicts).

        Raises:
            ValueError: When the episode is empty or a step lacks ``state`` or ``action``.
        """
        episode = list(episode)
        if not episode:
            raise ValueError("episode must hold at least one transition, got an empty list")
        for step, transition in enumerate(episode):
            _check_pair(transition, f"episode[{step}]")
        rewards = self.reward(_concatenated(episode, "state"), _concatenated(episode, "action"))
        self.constrained_policy_optimization.store_episode(
            [_with_reward(t, r) for t, r in zip(episode, rewards.view(-1).tolist())]
        )

    def store_expert_transition(
        self, transition: Union[ExpertTransition, TransitionBase, Dict[str, Any]]
    ) -> None:
        """Add one expert step to the expert buffer (only its ``state`` and ``action`` are kept).

        Args:
            transition: An :class:`ExpertTransition`, a transition or a dict with ``state`` and ``action``.

        Raises:
            ValueError: When ``state`` or ``action`` is missing (the message names them).
        """
        self.expert_replay_buffer.append(
            _as_expert(transition, "the expert transition"), required_attrs=EXPERT_ATTRS
        )

    def store_expert_episode(
        self, episode: List[Union[ExpertTransition, TransitionBase, Dict[str, Any]]]
    ) -> None:
        """Add the steps of an expert episode to the expert buffer, in one operation.

        Args:
            episode: Expert steps (:class:`ExpertTransition` objects, transitions or dicts),
                each with ``state`` and ``action``.

        Raises:
            ValueError: When a step lacks ``state`` or ``action`` (the message names the step
                and what it lacks).
        """
        self.expert_replay_buffer.extend(
            [_as_expert(t, f"expert episode[{i}]") for i, t in enumerate(episode)],
            required_attrs=EXPERT_ATTRS,
        )

    # -- update -------------------------------------------------------------------------
    def _discriminator_loss(
        self,
        expert_state: Dict[str, Any],
        expert_action: Dict[str, Any],
        state: Dict[str, Any],
        action: Dict[str, Any],
    ) -> torch.Tensor:
        """``criterion(D(learner), 1) + criterion(D(expert), 0)``."""
        learner = self._discriminate(state, action)
        expert = self._discriminate(expert_state, expert_action)
        return self.discriminator_criterion(
            learner, torch.ones_like(learner)
        ) + self.discriminator_criterion(expert, torch.zeros_like(expert))

    def _sample_pairs(self, buffer: Buffer, concatenate: bool) -> Sequence[Any]:
        _, pairs = buffer.sample_batch(
            self.batch_size,
            concatenate,
            sample_method="random_unique",
            sample_attrs=["state", "action"],
        )
        return pairs

    def _discriminator_step(self, update: bool, concatenate: bool) -> float:
        """One discriminator step (or, with ``update=False``, its loss only); returns the loss."""
        expert = self._sample_pairs(self.expert_replay_buffer, concatenate)
        learner = self._sample_pairs(
            self.constrained_policy_optimization.replay_buffer, concatenate
        )
        if not update:
            with torch.no_grad():
                return self._discriminator_loss(*expert, *learner).item()
        loss = self._discriminator_loss(*expert, *learner)
        self._maybe_visualize(loss, "discriminator")
        self._optimize(loss, self.discriminator_optim, self.discriminator, self.gradient_max)
        return loss.item()

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_discriminator: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[GAILResult]:
        """Train the discriminator, then the generator on the stored episodes (its buffer is emptied).

        Args:
            update_value: Step the generator's critic.
            update_policy: Step the generator's actor.
            update_discriminator: Step the discriminator (otherwise its loss is only measured).
            concatenate_samples: Hand the networks batched tensors (``False``: per-sample lists).

        Returns:
            ``(policy value, value loss, discriminator loss)`` as floats; ``None`` when the
            generator has stored nothing.

        Raises:
            ValueError: When no expert step has been stored.
        """
        if self.constrained_policy_optimization.replay_buffer.size() == 0:
            return None
        if self.expert_replay_buffer.size() == 0:
            raise ValueError(
                "GAIL.update needs expert steps, but the expert buffer is empty: store them with "
                "store_expert_episode or store_expert_transition first"
            )
        self._set_mode(True, self.discriminator)
        loss = sum(
            self._discriminator_step(update_discriminator, concatenate_samples)
            for _ in range(self.discriminator_update_times)
        )
        self._set_mode(False, self.discriminator)
        policy_value, value_loss = self.constrained_policy_optimization.update(
            update_value=update_value,
            update_policy=update_policy,
            concatenate_samples=concatenate_samples,
        )
        return GAILResult(policy_value, value_loss, loss / self.discriminator_update_times)

    def update_lr_scheduler(self) -> None:
        """Step the generator's learning-rate schedulers and the discriminator's."""
        self.constrained_policy_optimization.update_lr_scheduler()
        super().update_lr_scheduler()

    def set_progress(self, progress: float) -> None:
        """Move the scheduled options of GAIL and of the generator to ``progress``
        (see :meth:`TorchFramework.set_progress <machin.frame.algorithms.base.TorchFramework.set_progress>`).

        Args:
            progress: Fraction of training done, in ``[0, 1]``.
        """
        self.constrained_policy_optimization.set_progress(progress)
        super().set_progress(progress)

    # -- configs ------------------------------------------------------------------------
    @classmethod
    def generate_config(cls, config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """A complete GAIL config, Machin 0.4's layout: ``config`` plus what it lacks.

        ``frame_config`` holds the discriminator (``models``, ``model_args``,
        ``model_kwargs``, placeholder ``"Discriminator"``), its ``optimizer``, GAIL's options,
        ``constrained_policy_optimization`` (``"PPO"`` or ``"TRPO"``), a complete config of
        each generator (``PPO_config``, ``TRPO_config``) and ``expert_trajectory_path``, a
        file of expert episodes that :meth:`init_from_config` loads when it exists (see
        :func:`load_expert_trajectories`). Given values are kept; the generators' configs are
        completed too.

        Args:
            config: A config to complete, or ``None``.

        Raises:
            ConfigError: When ``config`` or its ``frame_config`` is not a dict, or names
                another algorithm.
        """
        config = {} if config is None else config
        _expect_dict("config", config)
        if config.get("frame", cls.__name__) != cls.__name__:
            raise ConfigError(f"config['frame'] is {config['frame']!r}, but the config is for GAIL")
        given = copy.deepcopy(config.get("frame_config", {}))
        _expect_dict("frame_config", given)
        frame_config = {
            "models": ["Discriminator"],
            "model_args": [[]],
            "model_kwargs": [{}],
            "optimizer": "Adam",
            "constrained_policy_optimization": "PPO",
            "expert_trajectory_path": "trajectory.data",
        }
        frame_config.update(
            {name: _json_value(spec.default) for name, spec in option_specs(cls).items()}
        )
        frame_config.update(given)
        for name in CONFIG_GENERATORS:
            frame_config[f"{name}_config"] = _generator_class(name).generate_config(
                given.get(f"{name}_config")
            )
        return {**copy.deepcopy(config), "frame": cls.__name__, "frame_config": frame_config}

    @classmethod
    def init_from_config(cls, config: Dict[str, Any], model_device: Any = "cpu") -> GAIL:
        """Build GAIL from a config of :meth:`generate_config`: first the generator its
        ``constrained_policy_optimization`` names (from that generator's config), then the
        discriminator; then the expert episodes of ``expert_trajectory_path`` are stored,
        when that file exists.

        Args:
            config: The config.
            model_device: Device of every network.

        Raises:
            ConfigError: For an unknown or missing key, an unknown generator, a class path
                that does not import or an option GAIL refuses.
        """
        frame_config = _checked_frame_config(cls, config)
        kind = frame_config["constrained_policy_optimization"]
        if kind not in CONFIG_GENERATORS:
            raise ConfigError(
                f"frame_config.constrained_policy_optimization must be one of "
                f"{list(CONFIG_GENERATORS)}, got {kind!r}"
            )
        generator = _generator_class(kind).init_from_config(
            frame_config[f"{kind}_config"], model_device
        )
        discriminator = build_networks(frame_config, 1, model_device)[0]
        optimizer = resolve_class(frame_config["optimizer"], "frame_config.optimizer", torch.optim)
        options = _options_of(cls, frame_config)
        try:
            gail = cls(discriminator, generator, optimizer, **options)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"frame_config of GAIL refused: {error}") from error
        path = frame_config.get("expert_trajectory_path")
        if path and os.path.isfile(path):
            load_expert_trajectories(gail, path)
        return gail


def _generator_class(name: str) -> type:
    return {"PPO": PPO, "TRPO": TRPO}[name]


def _checked_frame_config(cls: type, config: Any) -> Dict[str, Any]:
    """``config["frame_config"]`` after checking the frame and that every key is known and present."""
    _expect_dict("config", config)
    if config.get("frame", cls.__name__) != cls.__name__:
        raise ConfigError(
            f"config['frame'] is {config['frame']!r}, but init_from_config was called on GAIL"
        )
    if "frame_config" not in config:
        raise ConfigError("config of GAIL lacks the key 'frame_config'")
    frame_config = config["frame_config"]
    _expect_dict("frame_config", frame_config)
    required = list(MODEL_KEYS) + ["optimizer", "constrained_policy_optimization"]
    known = set(required) | set(option_specs(cls)) | {"expert_trajectory_path"}
    known |= {f"{name}_config" for name in CONFIG_GENERATORS}
    unknown = sorted(set(frame_config) - known)
    if unknown:
        raise ConfigError(
            f"unknown key frame_config.{unknown[0]} for GAIL; known keys are {sorted(known)}"
        )
    missing = [key for key in required if key not in frame_config]
    kind = frame_config.get("constrained_policy_optimization")
    if kind in CONFIG_GENERATORS and f"{kind}_config" not in frame_config:
        missing.append(f"{kind}_config")
    if missing:
        raise ConfigError(f"config of GAIL lacks the key frame_config.{missing[0]}")
    return frame_config


def _options_of(cls: type, frame_config: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword options of ``frame_config``, the scheduler class resolved."""
    options = {name: frame_config[name] for name in option_specs(cls) if name in frame_config}
    if options.get("lr_scheduler") is not None:
        options["lr_scheduler"] = resolve_class(
            options["lr_scheduler"], "frame_config.lr_scheduler", torch.optim.lr_scheduler
        )
    return options


def load_expert_trajectories(gail: GAIL, path: str) -> int:
    """Store the expert episodes of the file ``path`` in ``gail``; returns how many steps were stored.

    The file holds a list of episodes, each a list of dicts ``{"state": {...}, "action":
    {...}}`` of tensors, as ``torch.save(episodes, path)`` writes it. It is read with
    ``weights_only=True``, so loading it never runs code.

    Args:
        gail: The GAIL framework whose expert buffer receives the steps.
        path: The file.

    Raises:
        ConfigError: When the file cannot be read or does not hold a list of episodes.
    """
    try:
        episodes = torch.load(path, weights_only=True)
    except Exception as error:  # noqa: BLE001 (any unreadable file is reported with its path)
        raise ConfigError(f"expert_trajectory_path {path!r} cannot be read: {error}") from error
    if not isinstance(episodes, (list, tuple)) or not all(
        isinstance(e, (list, tuple)) for e in episodes
    ):
        raise ConfigError(
            f"expert_trajectory_path {path!r} must hold a list of episodes (lists of steps), "
            f"got {type(episodes).__name__}"
        )
    for episode in episodes:
        gail.store_expert_episode(list(episode))
    return sum(len(episode) for episode in episodes)
