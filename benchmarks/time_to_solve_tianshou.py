"""Tianshou 2's runners for ``time_to_solve`` (Tianshou imported only inside a run).

Each algorithm is built from the task's zoo settings out of Tianshou's own parts (``Net`` and
its actor and critic heads, with the sizes and activations of SB3's default policies) and is
trained by Tianshou's trainer (``algorithm.create_trainer(...).run()``), the way Tianshou's
examples run it:

* DQN, SAC, TD3: ``learning_starts`` random steps first (``Collector.collect(random=True)``,
  rounded up to whole ``train_freq`` chunks, as Tianshou's examples fill the buffer before the
  trainer), then the ``OffPolicyTrainer``: chunks of ``train_freq`` steps, each followed by
  ``gradient_steps`` updates of ``batch_size``.
* PPO: the ``OnPolicyTrainer`` over a ``DummyVectorEnv`` of ``n_envs`` environments, rollouts of
  ``n_steps x n_envs`` steps, each followed by ``n_epochs`` passes in minibatches of
  ``batch_size``.
* The trainer's ``training_fn`` hook, called before every chunk, sets the schedules (DQN's
  exploration rate, PPO's clip range) and runs the harness's evaluation; a run that is to stop
  leaves the trainer by an exception of this module. Tianshou's test collector is not used.

Where a setting had to be translated:

* DQN: SB3's DQN (the zoo's) is neither double nor MSE: ``is_double=False`` and
  ``huber_loss_delta=1`` (SB3's smooth L1 loss). Tianshou counts the target network's period in
  updates, SB3 in environment steps; ``gradient_steps * ceil(target_update_interval /
  train_freq)`` updates copy it once before each burst, as SB3 does. Tianshou's DQN takes no
  gradient clipping option: a subclass hands ``max_grad_norm`` to its optimiser wrapper.
* PPO: SB3's orthogonal initialisation (gain sqrt(2), 0.01 for the logits, 1 for the value),
  Adam's ``eps=1e-5``, value weight 0.5, gradient norm 0.5, advantages normalised per minibatch.
* A linear learning rate is Tianshou's ``LRSchedulerFactoryLinear`` over the run's updates;
  SAC's entropy coefficient keeps its first rate (Tianshou's ``AutoAlpha`` refuses schedulers).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .time_to_solve import Evaluation, Task, _schedule_value, _spaces

__all__ = ["RUNNERS", "epsilon", "prefill_steps", "target_period", "update_calls"]


class _Stop(Exception):
    """Raised by the training hook to leave Tianshou's trainer when the harness stops a run."""


# -- settings translated (plain Python: tested without Tianshou) ------------------------------
def prefill_steps(task: Task) -> int:
    """Random steps before the trainer: ``learning_starts`` up to whole ``train_freq`` chunks,
    at most the budget (SB3 trains first after the chunk that passes ``learning_starts``)."""
    s = task.settings
    return min(task.budget, math.ceil(s["learning_starts"] / s["train_freq"]) * s["train_freq"])


def target_period(settings: Dict[str, Any]) -> int:
    """Updates between two copies of DQN's target network: one copy before each burst of
    ``gradient_steps`` (SB3 copies every ``target_update_interval`` environment steps)."""
    bursts = math.ceil(settings["target_update_interval"] / settings["train_freq"])
    return settings["gradient_steps"] * bursts


def epsilon(settings: Dict[str, Any], step: int, budget: int) -> float:
    """SB3's exploration rate at ``step``: 1 down to ``exploration_final_eps`` over the first
    ``exploration_fraction`` of the budget, then constant."""
    progress, final = step / budget, settings["exploration_final_eps"]
    if progress >= settings["exploration_fraction"]:
        return final
    return 1.0 + progress * (final - 1.0) / settings["exploration_fraction"]


def update_calls(task: Task) -> int:
    """How often the run calls ``algorithm.update`` (the length of a linear learning rate)."""
    s = task.settings
    if task.algorithm == "ppo":
        return max(1, math.ceil(task.budget / (s["n_steps"] * s["n_envs"])))
    chunks = math.ceil((task.budget - prefill_steps(task)) / s["train_freq"])
    return max(1, chunks * s["gradient_steps"])


# -- the algorithms ----------------------------------------------------------------------------
def _adam(task: Task, **kwargs: Any) -> Any:
    """Adam at the task's rate; a linear rate decays to zero over the run's update calls."""
    from tianshou.algorithm.optim import AdamOptimizerFactory, LRSchedulerFactoryLinear

    rate = task.settings["learning_rate"]
    factory = AdamOptimizerFactory(lr=_schedule_value(rate), **kwargs)
    if isinstance(rate, tuple):
        schedule = LRSchedulerFactoryLinear(
            max_epochs=1, epoch_num_steps=update_calls(task), collection_step_num_env_steps=1
        )
        factory.with_lr_scheduler_factory(schedule)
    return factory


def _dqn(task: Task) -> Any:
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.utils.net.common import Net

    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    net = Net(
        state_shape=obs_space.shape,
        action_shape=int(act_space.n),
        hidden_sizes=list(s["net_arch"]),
    )
    policy = DiscreteQLearningPolicy(
        model=net, action_space=act_space, observation_space=obs_space, eps_training=1.0
    )
    clip = s["max_grad_norm"]

    class ClippedDQN(DQN):
        def _create_policy_optimizer(self, optim: Any) -> Any:
            return self._create_optimizer(self.policy, optim, max_grad_norm=clip)

    return ClippedDQN(
        policy=policy,
        optim=_adam(task),
        gamma=s["gamma"],
        target_update_freq=target_period(s),
        is_double=False,
        huber_loss_delta=1.0,
    )


def _orthogonal(module: nn.Module, last_gain: float) -> None:
    """SB3's ``ortho_init``: gain sqrt(2), zero biases, ``last_gain`` for the last linear layer."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    for layer in linears:
        gain = last_gain if layer is linears[-1] else math.sqrt(2)
        nn.init.orthogonal_(layer.weight, gain=gain)
        nn.init.zeros_(layer.bias)


def _ppo(task: Task) -> Any:
    from tianshou.algorithm import PPO
    from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic

    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    body = functools.partial(
        Net, state_shape=obs_space.shape, hidden_sizes=[64, 64], activation=nn.Tanh
    )
    actor = DiscreteActor(
        preprocess_net=body(), action_shape=int(act_space.n), softmax_output=False
    )
    critic = DiscreteCritic(preprocess_net=body())
    _orthogonal(actor, 0.01)
    _orthogonal(critic, 1.0)
    policy = DiscreteActorPolicy(
        actor=actor, action_space=act_space, observation_space=obs_space, deterministic_eval=True
    )
    return PPO(
        policy=policy,
        critic=critic,
        optim=_adam(task, eps=1e-5),
        eps_clip=_schedule_value(s["clip_range"]),
        advantage_normalization=True,
        vf_coef=0.5,
        ent_coef=s["ent_coef"],
        max_grad_norm=0.5,
        gae_lambda=s["gae_lambda"],
        gamma=s["gamma"],
    )


def _critics(task: Task) -> Tuple[Any, Any]:
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousCritic

    obs_space, act_space = _spaces(task.env_id)

    def critic() -> Any:
        net = Net(
            state_shape=obs_space.shape,
            action_shape=act_space.shape,
            hidden_sizes=list(task.settings["net_arch"]),
            concat=True,
        )
        return ContinuousCritic(preprocess_net=net)

    return critic(), critic()


def _sac(task: Task) -> Any:
    from tianshou.algorithm import SAC
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic

    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    body = Net(state_shape=obs_space.shape, hidden_sizes=list(s["net_arch"]))
    actor = ContinuousActorProbabilistic(
        preprocess_net=body, action_shape=act_space.shape, unbounded=True, conditioned_sigma=True
    )
    policy = SACPolicy(actor=actor, action_space=act_space, observation_space=obs_space)
    critic, critic2 = _critics(task)
    alpha = AutoAlpha(
        target_entropy=-float(np.prod(act_space.shape)),
        log_alpha=0.0,
        optim=AdamOptimizerFactory(lr=_schedule_value(s["learning_rate"])),
    )
    return SAC(
        policy=policy,
        policy_optim=_adam(task),
        critic=critic,
        critic_optim=_adam(task),
        critic2=critic2,
        critic2_optim=_adam(task),
        tau=s["tau"],
        gamma=s["gamma"],
        alpha=alpha,
    )


def _td3(task: Task) -> Any:
    from tianshou.algorithm import TD3
    from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
    from tianshou.exploration import GaussianNoise
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorDeterministic

    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    body = Net(state_shape=obs_space.shape, hidden_sizes=list(s["net_arch"]))
    actor = ContinuousActorDeterministic(preprocess_net=body, action_shape=act_space.shape)
    policy = ContinuousDeterministicPolicy(
        actor=actor,
        exploration_noise=GaussianNoise(sigma=s["noise_std"]),
        action_space=act_space,
        observation_space=obs_space,
    )
    critic, critic2 = _critics(task)
    return TD3(
        policy=policy,
        policy_optim=_adam(task),
        critic=critic,
        critic_optim=_adam(task),
        critic2=critic2,
        critic2_optim=_adam(task),
        tau=s["tau"],
        gamma=s["gamma"],
        policy_noise=0.2,
        update_actor_freq=2,
        noise_clip=0.5,
    )


_BUILD = {"dqn": _dqn, "ppo": _ppo, "sac": _sac, "td3": _td3}


# -- the runs ----------------------------------------------------------------------------------
def _greedy(policy: Any) -> Callable[[np.ndarray], Any]:
    """The evaluation policy: Tianshou's ``compute_action`` outside a training step (the mode
    of PPO's and SAC's distributions, DQN without exploration, TD3 without noise)."""
    from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

    def act(obs: np.ndarray) -> Any:
        outside = policy_within_training_step(policy, enabled=False)
        with torch.no_grad(), outside, torch_train_mode(policy, enabled=False):
            return policy.compute_action(obs)

    return act


def _envs(env_id: str, count: int, seed: int) -> Any:
    """``count`` environments in a ``DummyVectorEnv``, seeded ``seed``, ``seed + 1``, ..."""
    from tianshou.env import DummyVectorEnv

    envs = DummyVectorEnv([functools.partial(gym.make, env_id) for _ in range(count)])
    envs.seed(seed)
    return envs


def _set_schedules(algorithm: Any, task: Task, step: int) -> None:
    s = task.settings
    if task.algorithm == "dqn":
        algorithm.policy.set_eps_training(epsilon(s, step, task.budget))
    elif task.algorithm == "ppo":
        algorithm.eps_clip = _schedule_value(s["clip_range"], 1.0 - step / task.budget)


def _hook(algorithm: Any, collector: Any, task: Task, evaluation: Evaluation) -> Callable:
    """The trainer's ``training_fn``: schedules, then the harness's evaluation when due."""
    greedy = _greedy(algorithm.policy)

    def training_fn(epoch: int, env_step: int) -> None:
        step = collector.collect_step
        _set_schedules(algorithm, task, step)
        if evaluation.step(step, greedy):
            raise _Stop()

    return training_fn


def _prefill(collector: Any, steps: int, evaluation: Evaluation, greedy: Callable) -> bool:
    """Random steps in chunks that end at the evaluation points; return whether to stop."""
    while collector.collect_step < steps:
        to_next = evaluation.every - collector.collect_step % evaluation.every
        collector.collect(n_step=min(to_next, steps - collector.collect_step), random=True)
        if evaluation.step(collector.collect_step, greedy):
            return True
    return False


def _train(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    """Build the algorithm and its collector, fill the buffer (off-policy), run the trainer."""
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.trainer import OffPolicyTrainerParams, OnPolicyTrainerParams

    s = task.settings
    algorithm = _BUILD[task.algorithm](task)
    common: Dict[str, Any] = dict(max_epochs=1, verbose=False, show_progress=False)
    if task.algorithm == "ppo":
        rollout = s["n_steps"] * s["n_envs"]
        envs = _envs(task.env_id, s["n_envs"], seed)
        collector = Collector(algorithm, envs, VectorReplayBuffer(rollout, s["n_envs"]))
        params_class, start = OnPolicyTrainerParams, 0
        common.update(
            collection_step_num_env_steps=rollout,
            batch_size=s["batch_size"],
            update_step_num_repetitions=s["n_epochs"],
        )
    else:
        envs = _envs(task.env_id, 1, seed)
        buffer = VectorReplayBuffer(s["buffer_size"], 1)
        collector = Collector(algorithm, envs, buffer, exploration_noise=True)
        params_class, start = OffPolicyTrainerParams, prefill_steps(task)
        common.update(
            collection_step_num_env_steps=s["train_freq"],
            update_step_num_gradient_steps_per_sample=s["gradient_steps"] / s["train_freq"],
            batch_size=s["batch_size"],
        )
    collector.reset()
    try:
        if _prefill(collector, start, evaluation, _greedy(algorithm.policy)):
            return
        params = params_class(
            training_collector=collector,
            epoch_num_steps=task.budget - start,
            training_fn=_hook(algorithm, collector, task, evaluation),
            **common,
        )
        algorithm.create_trainer(params).run(reset_collectors=False)
        evaluation.step(collector.collect_step, _greedy(algorithm.policy))  # the last chunk's
    except _Stop:
        pass
    finally:
        envs.close()


RUNNERS: Dict[Tuple[str, str], Callable[[Task, int, Evaluation, Dict[str, Any]], None]] = {
    ("tianshou", algorithm): _train for algorithm in ("dqn", "ppo", "sac", "td3")
}
