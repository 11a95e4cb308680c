"""Data flow in machin, part 3: how ``safe_call`` hands dictionaries to ``forward``.

Run it with ``python examples/tutorials/data_flow/part3_safe_call.py``. Every network
call inside an algorithm goes through
:func:`machin.frame.algorithms.utils.safe_call`: it reads the argument names of the
network's ``forward`` and passes each one the dictionary entry of the same name,
like a keyword-argument call that tolerates extra keys.
"""

import torch
from torch import nn

from machin.frame.algorithms.utils import safe_call
from machin.model.nets import NeuralNetworkModule


def section(title):
    print(f"\n=== {title} ===")


# The networks subclass NeuralNetworkModule, which tells safe_call their devices (section 6).
class QNet(NeuralNetworkModule):
    """Q values of 2 actions for a state of 3 numbers; its argument is called ``state``."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, state):
        return self.fc(state)


class Critic(NeuralNetworkModule):
    """Q(s, a) from two state parts and an action; ``scale`` has a default."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2 + 2 + 1, 1)

    def forward(self, position, velocity, action, scale=1.0):
        return self.fc(torch.cat([position, velocity, action], dim=1)) * scale


class Inspector(NeuralNetworkModule):
    """A forward with ``**kwargs`` receives every key; this one reports what it got."""

    def forward(self, **kwargs):
        return sorted(kwargs)


torch.manual_seed(0)
qnet, critic = QNet(), Critic()
states = torch.zeros(4, 3)

section("1. Keys are matched to forward's argument names")
print(
    "QNet.forward(state) with {'state': [4, 3]} ->", tuple(safe_call(qnet, {"state": states}).shape)
)

section("2. Extra keys are ignored")
# A state dict may carry more than one network needs (here a mask for another network).
out = safe_call(qnet, {"state": states, "mask": torch.ones(4, 1)})
print("{'state', 'mask'} -> forward got only 'state'; output", tuple(out.shape))

section("3. Several dictionaries are merged")
# Algorithms pass the sampled state and action dicts together: safe_call(critic, state, action).
state = {"position": torch.zeros(4, 2), "velocity": torch.ones(4, 2)}
action = {"action": torch.ones(4, 1)}
print("critic(state dict, action dict) ->", tuple(safe_call(critic, state, action).shape))
# When two dicts share a key, the later one wins.
first, second = {"state": torch.zeros(1, 3)}, {"state": torch.ones(1, 3)}
same_as_second = torch.equal(safe_call(qnet, first, second), qnet(torch.ones(1, 3)))
print("safe_call(qnet, {'state': zeros}, {'state': ones}) used the ones:", same_as_second)

section("4. Arguments with defaults may be left out")
with torch.no_grad():
    default = safe_call(critic, state, action)
    zeroed = safe_call(critic, state, action, {"scale": 0.0})
print("without 'scale' (default 1.0):", default.view(-1).tolist())
print("with {'scale': 0.0}:          ", zeroed.view(-1).tolist())

section("5. A missing argument raises TypeError, naming what was given")
try:
    safe_call(critic, {"position": torch.zeros(4, 2)}, action)
except TypeError as error:
    print("TypeError:", error)
# The same happens when the keys were named after the environment instead of forward:
try:
    safe_call(qnet, {"observation": states})
except TypeError as error:
    print("TypeError:", error)
# required_argument makes an argument with a default compulsory.
try:
    safe_call(critic, state, action, required_argument=["scale"])
except TypeError as error:
    print("TypeError:", error)

section("6. Devices")
# Tensors are moved to the network's input device before the call. A network states its
# devices by subclassing machin.model.nets.NeuralNetworkModule (as here) or through
# machin.model.nets.static_module_wrapper / dynamic_module_wrapper; for a plain nn.Module
# safe_call uses the device of its first parameter and warns once per class.
print("qnet input device:", qnet.input_device, " output device:", qnet.output_device)

section("7. forward(**kwargs) receives every key")
print("keys received:", safe_call(Inspector(), {"state": 1, "mask": 2}, {"action": 3}, None))
# None entries among the dictionaries are skipped, as the call above shows.
