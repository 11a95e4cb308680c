"""TorchRL 0.14.1's runners for ``time_to_solve`` (TorchRL imported only inside a run).

TorchRL's compiled extension (``torchrl._torchrl``) does not load with torch 2.13: every
release from 0.10.1 to 0.14.1 was built against an older torch. What it provides is the
segment trees of prioritized replay, which none of the tasks uses; everything the runners
below use is pure Python and works without it: ``GymEnv`` and ``SerialEnv``, the single-process
``Collector``, ``TensorDictReplayBuffer`` over a ``LazyTensorStorage`` (uniform sampling, or
``SamplerWithoutReplacement`` for PPO's epochs), the losses ``DQNLoss``, ``ClipPPOLoss``,
``SACLoss``, ``TD3Loss``, ``GAE``, and the target updaters ``HardUpdate`` and ``SoftUpdate``.

Each run is written the way TorchRL's ``sota-implementations`` (dqn_cartpole.py,
ppo_mujoco.py, sac.py, td3.py) write theirs: a ``Collector`` yields batches of
``frames_per_batch`` steps, the loop extends a replay buffer and runs the updates by hand. The
settings are the zoo's, translated as for Tianshou (benchmarks/time_to_solve_tianshou.py):

* DQN, SAC, TD3: batches of ``train_freq`` steps; the collector's ``init_random_frames`` plays
  ``learning_starts`` (rounded up to whole batches) uniformly random steps; after every batch
  past ``learning_starts``, ``gradient_steps`` updates of ``batch_size``.
* DQN: not double, SB3's smooth L1 loss, ``max_grad_norm`` clipping; the target network is
  copied once before each burst (``HardUpdate`` every ``target_period`` updates); the
  ``EGreedyModule``'s rate is set to SB3's schedule before each batch.
* PPO: a ``SerialEnv`` of ``n_envs`` environments, rollouts of ``n_steps x n_envs`` steps;
  GAE once per rollout (as SB3; TorchRL's example recomputes it every epoch), then
  ``n_epochs`` passes in minibatches of ``batch_size``; SB3's orthogonal initialisation,
  Adam's ``eps=1e-5``, value weight 0.5 on the squared error, gradient norm 0.5, advantages
  normalised per minibatch; a linear rate and clip range follow SB3's progress (set before
  each rollout's updates).
* SAC: SB3's actor (a mean and a log standard deviation clamped to [-20, 2], squashed by
  ``TanhNormal`` to the bounds), the entropy coefficient from 1 tuned to ``-dim(action)``;
  a linear rate decays over the steps for all three optimisers.
* TD3: the actor's update and the targets' every second update; SB3 draws its exploration
  noise (``noise_std``) and target noise (0.2, clipped at 0.5) in actions scaled to [-1, 1],
  TorchRL in the environment's units: both are multiplied by ``action_scale``.

The evaluation is the harness's: the actor under ``ExplorationType.DETERMINISTIC`` (the Q
argmax, the distributions' mode, TD3 without noise) on one observation at a time.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .time_to_solve import Evaluation, Task, _schedule_value, _spaces
from .time_to_solve_tianshou import _orthogonal, epsilon, prefill_steps, target_period

__all__ = ["RUNNERS", "action_scale", "lr_at", "train_start"]


# -- settings translated (plain Python: tested without TorchRL) --------------------------------
def action_scale(space: gym.spaces.Box) -> float:
    """Half the width of ``space``'s bounds: SB3's noise in [-1, 1] times this is TorchRL's.

    Raises:
        ValueError: When the bounds' widths differ between dimensions.
    """
    widths = np.unique(np.asarray(space.high, np.float64) - np.asarray(space.low, np.float64))
    if len(widths) != 1:
        raise ValueError(f"space must have one width in every dimension, got {space}")
    return float(widths[0]) / 2.0


def lr_at(task: Task, step: int) -> float:
    """The learning rate at ``step`` (SB3's progress left: ``1 - step / budget``)."""
    return _schedule_value(task.settings["learning_rate"], max(0.0, 1.0 - step / task.budget))


def train_start(task: Task) -> int:
    """The random steps of the collector (``init_random_frames``): ``learning_starts`` up to
    whole ``train_freq`` batches; the first update follows the batch that passes it."""
    return prefill_steps(task)


# -- the networks ------------------------------------------------------------------------------
class _LocScale(nn.Module):
    """SB3's Gaussian head: the first half of the outputs is the mean, the second half the log
    standard deviation clamped to [-20, 2]."""

    def forward(self, out: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        loc, log_std = out.chunk(2, dim=-1)
        return loc, log_std.clamp(-20.0, 2.0).exp()


def _mlp(inputs: int, outputs: int, cells: Any, activation: type = nn.ReLU) -> nn.Module:
    from torchrl.modules import MLP

    return MLP(
        in_features=inputs, out_features=outputs, num_cells=list(cells), activation_class=activation
    )


def _gym_env(env_id: str) -> Any:
    from torchrl.envs.libs.gym import GymEnv

    return GymEnv(env_id, categorical_action_encoding=True)


def _env(task: Task, seed: int) -> Any:
    """The training environment: one ``GymEnv``, or PPO's ``SerialEnv`` of ``n_envs``."""
    from torchrl.envs import SerialEnv

    if task.algorithm == "ppo":
        env = SerialEnv(task.settings["n_envs"], lambda: _gym_env(task.env_id))
    else:
        env = _gym_env(task.env_id)
    env.set_seed(seed)
    return env


def _greedy(actor: Any, discrete: bool) -> Callable[[np.ndarray], Any]:
    """The evaluation policy: ``actor`` with ``ExplorationType.DETERMINISTIC``."""
    from tensordict import TensorDict
    from torchrl.envs import ExplorationType, set_exploration_type

    def act(obs: np.ndarray) -> Any:
        data = TensorDict({"observation": torch.as_tensor(obs, dtype=torch.float32)}, [])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            action = actor(data)["action"]
        return int(action) if discrete else action.numpy()

    return act


def _q_and_policy(task: Task, spec: Any) -> Tuple[Any, Any]:
    """SAC's or TD3's actor and critic as ``TensorDictModule``s (SB3's default sizes)."""
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.modules import ProbabilisticActor, TanhModule, TanhNormal, ValueOperator

    obs_space, act_space = _spaces(task.env_id)
    n_obs, n_act, arch = obs_space.shape[0], act_space.shape[0], task.settings["net_arch"]
    critic = ValueOperator(_mlp(n_obs + n_act, 1, arch), in_keys=["action", "observation"])
    if task.algorithm == "sac":
        body = nn.Sequential(_mlp(n_obs, 2 * n_act, arch), _LocScale())
        actor = ProbabilisticActor(
            TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"],
            spec=spec,
            distribution_class=TanhNormal,
            distribution_kwargs={"low": spec.space.low, "high": spec.space.high, "tanh_loc": False},
        )
    else:
        body = TensorDictModule(
            _mlp(n_obs, n_act, arch), in_keys=["observation"], out_keys=["param"]
        )
        actor = TensorDictSequential(
            body, TanhModule(in_keys=["param"], out_keys=["action"], spec=spec)
        )
    return actor, critic


# -- the updates -------------------------------------------------------------------------------
class _Agent:
    """What a run's loop needs: the policies, and ``update(batch)`` / ``before_batch(step)``."""

    def __init__(self, actor: Any, explore: Any, discrete: bool) -> None:
        self.actor, self.explore, self.discrete = actor, explore, discrete
        self.optimizers: list = []

    def set_lr(self, rate: float) -> None:
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = rate

    def before_batch(self, task: Task, step: int) -> None:
        """Schedules set before the next batch is collected (after this one's updates)."""
        self.set_lr(lr_at(task, step))

    def update(self, batch: Any) -> None:
        raise NotImplementedError


class _DQN(_Agent):
    def __init__(self, task: Task, spec: Any) -> None:
        from tensordict.nn import TensorDictSequential
        from torchrl.modules import EGreedyModule, QValueActor
        from torchrl.objectives import DQNLoss, HardUpdate

        s = task.settings
        obs_space, act_space = _spaces(task.env_id)
        q = QValueActor(
            _mlp(obs_space.shape[0], int(act_space.n), s["net_arch"]),
            in_keys=["observation"],
            spec=spec,
        )
        self.greedy = EGreedyModule(spec=spec, eps_init=1.0, eps_end=s["exploration_final_eps"])
        super().__init__(q, TensorDictSequential(q, self.greedy), True)
        self.loss = DQNLoss(q, loss_function="smooth_l1", delay_value=True, double_dqn=False)
        self.loss.make_value_estimator(gamma=s["gamma"])
        self.target = HardUpdate(self.loss, value_network_update_interval=target_period(s))
        self.optimizers = [torch.optim.Adam(self.loss.parameters(), lr=lr_at(task, 0))]
        self.max_grad_norm = s["max_grad_norm"]

    def before_batch(self, task: Task, step: int) -> None:
        super().before_batch(task, step)
        self.greedy.eps.fill_(epsilon(task.settings, step, task.budget))

    def update(self, batch: Any) -> None:
        loss = self.loss(batch)["loss"]
        self.optimizers[0].zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.loss.parameters(), self.max_grad_norm)
        self.optimizers[0].step()
        self.target.step()


class _SAC(_Agent):
    def __init__(self, task: Task, spec: Any) -> None:
        from torchrl.objectives import SACLoss, SoftUpdate

        s = task.settings
        actor, critic = _q_and_policy(task, spec)
        super().__init__(actor, actor, False)
        self.loss = SACLoss(
            actor_network=actor,
            qvalue_network=critic,
            num_qvalue_nets=2,
            loss_function="l2",
            delay_actor=False,
            delay_qvalue=True,
            alpha_init=1.0,
            target_entropy="auto",
        )
        self.loss.make_value_estimator(gamma=s["gamma"])
        self.target = SoftUpdate(self.loss, tau=s["tau"])
        rate = lr_at(task, 0)
        self.optimizers = [
            torch.optim.Adam(list(self.loss.actor_network_params.values(True, True)), lr=rate),
            torch.optim.Adam(list(self.loss.qvalue_network_params.values(True, True)), lr=rate),
            torch.optim.Adam([self.loss.log_alpha], lr=rate),
        ]

    def update(self, batch: Any) -> None:
        losses = self.loss(batch)
        total = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
        for optimizer in self.optimizers:
            optimizer.zero_grad()
        total.backward()
        for optimizer in self.optimizers:
            optimizer.step()
        self.target.step()


class _TD3(_Agent):
    def __init__(self, task: Task, spec: Any) -> None:
        from tensordict.nn import TensorDictSequential
        from torchrl.modules import AdditiveGaussianModule
        from torchrl.objectives import SoftUpdate, TD3Loss

        s = task.settings
        scale = action_scale(_spaces(task.env_id)[1])
        actor, critic = _q_and_policy(task, spec)
        noise = AdditiveGaussianModule(
            spec=spec, sigma_init=1.0, sigma_end=1.0, std=s["noise_std"] * scale
        )
        super().__init__(actor, TensorDictSequential(actor, noise), False)
        self.loss = TD3Loss(
            actor_network=actor,
            qvalue_network=critic,
            action_spec=spec,
            num_qvalue_nets=2,
            loss_function="l2",
            delay_actor=True,
            delay_qvalue=True,
            policy_noise=0.2 * scale,
            noise_clip=0.5 * scale,
        )
        self.loss.make_value_estimator(gamma=s["gamma"])
        self.target = SoftUpdate(self.loss, tau=s["tau"])
        rate = lr_at(task, 0)
        self.actor_optimizer = torch.optim.Adam(
            list(self.loss.actor_network_params.values(True, True)), lr=rate
        )
        self.critic_optimizer = torch.optim.Adam(
            list(self.loss.qvalue_network_params.values(True, True)), lr=rate
        )
        self.optimizers = [self.actor_optimizer, self.critic_optimizer]
        self.updates = 0

    def update(self, batch: Any) -> None:
        q_loss, _ = self.loss.value_loss(batch)
        self.critic_optimizer.zero_grad()
        q_loss.backward()
        self.critic_optimizer.step()
        self.updates += 1
        if self.updates % 2 == 0:  # SB3's policy_delay
            actor_loss, _ = self.loss.actor_loss(batch)
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            self.target.step()


_OFF_POLICY = {"dqn": _DQN, "sac": _SAC, "td3": _TD3}


# -- the runs ----------------------------------------------------------------------------------
def _batches(collector: Any) -> Iterator[Tuple[int, Any]]:
    """The collector's batches, each with the steps collected so far (batch included)."""
    steps = 0
    for data in collector:
        steps += data.numel()
        yield steps, data


def _collector(env: Any, policy: Any, frames: int, random_frames: int = 0) -> Any:
    from torchrl.collectors import Collector

    return Collector(
        create_env_fn=env,
        policy=policy,
        frames_per_batch=frames,
        total_frames=-1,  # endless: the harness's evaluation ends the run
        init_random_frames=random_frames or None,
        device="cpu",
        max_frames_per_traj=-1,
        auto_register_policy_transforms=False,  # no recurrent policy: no InitTracker needed
    )


def _off_policy(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    """DQN, SAC, TD3: batches of ``train_freq`` steps, each followed by a burst of updates."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    s = task.settings
    env = _env(task, seed)
    agent = _OFF_POLICY[task.algorithm](task, env.action_spec_unbatched)
    agent.before_batch(task, 0)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(s["buffer_size"]), batch_size=s["batch_size"]
    )
    collector = _collector(env, agent.explore, s["train_freq"], train_start(task))
    greedy = _greedy(agent.actor, agent.discrete)
    try:
        for steps, data in _batches(collector):
            buffer.extend(data.reshape(-1))
            if steps > s["learning_starts"]:
                for _ in range(s["gradient_steps"]):
                    agent.update(buffer.sample())
            agent.before_batch(task, steps)
            if evaluation.step(steps, greedy) or steps >= task.budget:
                return
    finally:
        collector.shutdown()  # closes the environment too


class _PPO:
    """SB3's PPO out of TorchRL's parts: actor, critic, ``GAE``, ``ClipPPOLoss``, one Adam."""

    def __init__(self, task: Task, spec: Any) -> None:
        from tensordict.nn import TensorDictModule
        from torchrl.modules import ProbabilisticActor, ValueOperator
        from torchrl.objectives import ClipPPOLoss
        from torchrl.objectives.value import GAE

        s = task.settings
        obs_space, act_space = _spaces(task.env_id)
        logits = _mlp(obs_space.shape[0], int(act_space.n), (64, 64), nn.Tanh)
        value = _mlp(obs_space.shape[0], 1, (64, 64), nn.Tanh)
        _orthogonal(logits, 0.01)
        _orthogonal(value, 1.0)
        self.actor = ProbabilisticActor(
            TensorDictModule(logits, in_keys=["observation"], out_keys=["logits"]),
            in_keys=["logits"],
            spec=spec,
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
        critic = ValueOperator(value, in_keys=["observation"])
        self.gae = GAE(
            gamma=s["gamma"], lmbda=s["gae_lambda"], value_network=critic, average_gae=False
        )
        self.loss = ClipPPOLoss(
            self.actor,
            critic,
            clip_epsilon=_schedule_value(s["clip_range"]),
            entropy_bonus=bool(s["ent_coef"]),
            entropy_coeff=s["ent_coef"] or None,
            critic_coeff=0.5,
            loss_critic_type="l2",
            normalize_advantage=True,
        )
        self.optimizer = torch.optim.Adam(self.loss.parameters(), lr=lr_at(task, 0), eps=1e-5)

    def schedules(self, task: Task, step: int) -> None:
        """SB3's progress left after the rollout that ends at ``step``: rate and clip range."""
        left = max(0.0, 1.0 - step / task.budget)
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(task, step)
        self.loss.clip_epsilon.fill_(_schedule_value(task.settings["clip_range"], left))

    def update(self, batch: Any) -> None:
        losses = self.loss(batch)
        total = losses["loss_objective"] + losses["loss_critic"]
        entropy = losses.get("loss_entropy", None)  # none without an entropy bonus
        if entropy is not None:
            total = total + entropy
        self.optimizer.zero_grad()
        total.backward()
        nn.utils.clip_grad_norm_(self.loss.parameters(), 0.5)
        self.optimizer.step()


def _on_policy(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    """PPO: rollouts of ``n_steps x n_envs``, GAE once, ``n_epochs`` passes in minibatches."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement

    s = task.settings
    rollout = s["n_steps"] * s["n_envs"]
    env = _env(task, seed)
    agent = _PPO(task, env.action_spec_unbatched)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(rollout),
        sampler=SamplerWithoutReplacement(),
        batch_size=s["batch_size"],
    )
    collector = _collector(env, agent.actor, rollout)
    greedy = _greedy(agent.actor, True)
    try:
        for steps, data in _batches(collector):
            agent.schedules(task, steps)
            with torch.no_grad():
                data = agent.gae(data)
            for _ in range(s["n_epochs"]):
                buffer.extend(data.reshape(-1))  # the whole storage: one epoch's minibatches
                for batch in buffer:
                    agent.update(batch)
            if evaluation.step(steps, greedy) or steps >= task.budget:
                return
    finally:
        collector.shutdown()  # closes the environment too


RUNNERS: Dict[Tuple[str, str], Callable[[Task, int, Evaluation, Dict[str, Any]], None]] = {
    ("torchrl", "dqn"): _off_policy,
    ("torchrl", "ppo"): _on_policy,
    ("torchrl", "sac"): _off_policy,
    ("torchrl", "td3"): _off_policy,
}
