"""Data flow in machin, part 1: what a transition holds.

Run it with ``python examples/tutorials/data_flow/part1_transition.py``; it prints
every object it builds. Part 2 (part2_buffer.py) stores such transitions in a
buffer and samples them back.
"""

import torch

from machin.frame.transition import Transition


def section(title):
    print(f"\n=== {title} ===")


section("1. One step of an environment")
# An observation of 5 numbers and an action of 2 numbers. Every tensor starts with the
# batch dimension, and one environment step is a batch of one: shapes [1, 5] and [1, 2].
observation = torch.zeros(1, 5)
action = torch.zeros(1, 2)
step = Transition(
    state={"state": observation},  # major attribute: a dict of tensors
    action={"action": action},  # major attribute
    next_state={"state": observation + 1},  # major attribute
    reward=1.0,  # sub attribute: a scalar or a tensor
    terminal=False,  # sub attribute
)
print(step)
print("major attributes:", step.major_attr)
print("sub attributes:  ", step.sub_attr)
print("custom attributes:", step.custom_attr)
print("all keys, in order:", step.keys())
print("step['reward'] =", step["reward"], "  step.state =", step.state)

section("2. A major attribute may hold several tensors")
# A robot may observe a camera image and its joint positions: two keys of one dict. Each
# key is batched separately later, and each key can become one argument of a network.
rich = Transition(
    state={"image": torch.zeros(1, 3, 8, 8), "joints": torch.zeros(1, 4)},
    action={"torque": torch.zeros(1, 4)},
    next_state={"image": torch.ones(1, 3, 8, 8), "joints": torch.ones(1, 4)},
    reward=torch.tensor([[0.5, -0.1]]),  # a sub attribute may be a [1, N] tensor (two rewards)
    terminal=False,
)
print(rich)

section("3. Tensors are cloned and detached when the transition is built")
weights = torch.ones(1, 5, requires_grad=True)
computed = weights * 2  # part of an autograd graph
kept = Transition(
    state={"state": computed},
    action={"action": action},
    next_state={"state": computed},
    reward=0.0,
    terminal=False,
)
computed.data.fill_(-1.0)  # change the caller's tensor afterwards
print("caller's tensor now:", computed)
print(
    "stored tensor:      ",
    kept.state["state"],
    "requires_grad =",
    kept.state["state"].requires_grad,
)

section("4. Custom attributes: any other keyword")
# Extra keywords become custom attributes (sorted by name). Numbers, strings, lists,
# dicts and tensors (of any shape) are all fine; they are copied (tensors cloned), so
# later changes by the caller do not leak in.
info = {"lives": 3}
custom = Transition(
    state={"state": observation},
    action={"action": action},
    next_state={"state": observation},
    reward=0.0,
    terminal=False,
    value=0.25,
    truncated=True,
    info=info,
    hidden=torch.zeros(1, 3),
)
info["lives"] = 0
print("custom attributes:", custom.custom_attr)
for name in custom.custom_attr:
    print(f"  {name} = {custom[name]!r}")

section("5. What a transition refuses (each raises ValueError)")
attempts = {
    "a batch of two in one Transition": dict(
        state={"state": torch.zeros(2, 5)},
        action={"action": torch.zeros(2, 2)},
        next_state={"state": torch.zeros(2, 5)},
        reward=0.0,
        terminal=False,
    ),
    "a tensor without a batch dimension": dict(
        state={"state": torch.zeros(5)},
        action={"action": action},
        next_state={"state": observation},
        reward=0.0,
        terminal=False,
    ),
    "a bare tensor as a major attribute": dict(
        state=observation,
        action={"action": action},
        next_state={"state": observation},
        reward=0.0,
        terminal=False,
    ),
}
for what, arguments in attempts.items():
    try:
        Transition(**arguments)
        print(f"{what}: accepted")
    except ValueError as error:
        print(f"{what}: ValueError: {error}")

section("6. Moving a transition between devices")
# to() moves every tensor of the major and sub attributes in place and returns the
# transition; custom attributes (tensors among them) stay where they are.
device = "cuda" if torch.cuda.is_available() else "cpu"
print("moved to", step.to(device).state["state"].device)
