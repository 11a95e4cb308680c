"""Data flow in machin, part 4: the whole path inside an algorithm (DQN).

Run it with ``python examples/tutorials/data_flow/part4_algorithm.py``. The path is
``store_transition`` -> buffer -> ``sample_batch`` -> ``safe_call`` -> your network,
and back as Q values that the update turns into a loss. Parts 1 to 3 show each step
on its own.
"""

import torch
from torch import nn

from machin.frame.algorithms import DQN
from machin.model.nets import NeuralNetworkModule

torch.manual_seed(0)


def section(title):
    print(f"\n=== {title} ===")


class QNet(NeuralNetworkModule):
    """Q values of 2 actions from a state given in two parts, ``position`` and ``velocity``."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, position, velocity):
        return self.net(torch.cat([position, velocity], dim=1))


class BonusDQN(DQN):
    """DQN whose target adds a per-step bonus stored as a custom attribute."""

    @staticmethod
    def reward_function(reward, discount, next_value, terminal, others):
        # Custom attributes reach the update in ``others`` (the "*" of sample_attrs). They
        # are not concatenated here, so "bonus" is a list with one float per sample.
        bonus = torch.tensor(others["bonus"], dtype=reward.dtype, device=reward.device).view(-1, 1)
        return reward + bonus + discount * (1.0 - terminal) * next_value


def random_step():
    """One made-up step of a 4-number observation, split the way QNet reads it."""
    state, next_state = torch.randn(1, 4), torch.randn(1, 4)
    return {
        # The sub-keys of the state dicts are QNet.forward's argument names.
        "state": {"position": state[:, :2], "velocity": state[:, 2:]},
        "action": {"action": torch.randint(2, (1, 1))},  # DQN reads the key "action"
        "next_state": {"position": next_state[:, :2], "velocity": next_state[:, 2:]},
        "reward": 1.0,
        "terminal": False,
        "bonus": 0.1,  # a custom attribute, used by BonusDQN.reward_function
    }


dqn = BonusDQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), batch_size=8)

section("1. Acting: the state dict goes through safe_call to QNet.forward")
step = random_step()
print("act_discrete ->", dqn.act_discrete(step["state"]).tolist())
print("criticize    ->", dqn.criticize(step["state"]).tolist())

section("2. Storing: store_transition appends to the algorithm's buffer")
for _ in range(20):
    dqn.store_transition(random_step())
print("buffer size:", dqn.replay_buffer.size(), " attributes:", dqn.replay_buffer.attribute_names)

section("3. Sampling: the same call DQN.update makes")
size, (state, action, reward, next_state, terminal, others) = dqn.replay_buffer.sample_batch(
    dqn.batch_size,
    True,
    sample_method="random_unique",
    sample_attrs=["state", "action", "reward", "next_state", "terminal", "*"],
)
print("size", size)
print("state     ", {k: tuple(v.shape) for k, v in state.items()})
print("action    ", {k: tuple(v.shape) for k, v in action.items()})
print("reward    ", tuple(reward.shape), " terminal", tuple(terminal.shape), terminal.dtype)
print("next_state", {k: tuple(v.shape) for k, v in next_state.items()})
print("others    ", others)

section("4. Updating: Q(state), Q(next_state), the target with the bonus, one optimizer step")
print("Q values of the sampled states:", tuple(dqn.criticize(state).shape))
losses = [dqn.update() for _ in range(3)]
print("update() returns the loss as a Python float:", [round(loss, 4) for loss in losses])

section("5. Keys that do not match the network fail at the first network call")
# The buffer accepts any consistent layout, so wrong names go unnoticed while storing
# and are reported by safe_call when a network is called: here when acting.
misnamed = BonusDQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), batch_size=8)
wrong = random_step()
wrong["state"] = {"observation": torch.randn(1, 4)}
wrong["next_state"] = {"observation": torch.randn(1, 4)}
misnamed.store_transition(wrong)
print("stored with the key 'observation': buffer size", misnamed.replay_buffer.size())
try:
    misnamed.act_discrete(wrong["state"])
except TypeError as error:
    print("TypeError:", error)
