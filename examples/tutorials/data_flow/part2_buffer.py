"""Data flow in machin, part 2: storing transitions in a buffer and sampling them back.

Run it with ``python examples/tutorials/data_flow/part2_buffer.py``; it prints what
every call returns. Algorithms do exactly this inside ``store_transition`` (append)
and ``update`` (sample_batch); part 4 shows it from the algorithm's side.
"""

import torch

from machin.frame.buffers import Buffer

torch.manual_seed(0)  # the random sample methods draw from torch's generator


def section(title):
    print(f"\n=== {title} ===")


def describe(value):
    """Short text for a sampled value: tensors by shape and dtype, lists by their items."""
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)} {str(value.dtype).replace('torch.', '')} {value.view(-1).tolist()}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    return repr(value)


section("1. Appending")
# The buffer takes a Transition or a plain dict (which it turns into a Transition).
# Step i has the state [i, i, i], action i % 2, reward i, and two custom attributes:
# a number ("value") and a string ("note").
buffer = Buffer(buffer_size=100)
for i in range(6):
    buffer.append(
        {
            "state": {"state": torch.full((1, 3), float(i))},
            "action": {"action": torch.tensor([[i % 2]])},
            "next_state": {"state": torch.full((1, 3), float(i + 1))},
            "reward": float(i),
            "terminal": i == 5,
            "value": 0.5 * i,
            "note": f"step {i}",
        }
    )
print("stored:", buffer.size(), "transitions with attributes", buffer.attribute_names)

ATTRS = ["state", "action", "reward", "next_state", "terminal", "*"]

section("2. sample_batch with concatenate=True (what updates use)")
# sample_attrs picks the attributes and their order; "*" stands for a dict of every
# custom attribute not named otherwise. Major attributes come back as dicts of [B, ...]
# tensors (one per key), sub attributes as [B, 1] tensors, custom ones as lists.
size, (state, action, reward, next_state, terminal, others) = buffer.sample_batch(
    3, concatenate=True, sample_attrs=ATTRS
)
print("size      ", size)
print("state     ", describe(state))
print("action    ", describe(action))
print("reward    ", describe(reward))
print("next_state", describe(next_state))
print("terminal  ", describe(terminal))
print("others    ", describe(others))

section("3. sample_batch with concatenate=False")
# Nothing is joined: every entry is a list with one item per sample, tensors keep their
# [1, ...] shape and scalars come back as the Python values that were stored.
size, (state, action, reward, next_state, terminal, others) = buffer.sample_batch(
    3, concatenate=False, sample_attrs=ATTRS
)
print("state     ", describe(state))
print("reward    ", describe(reward))
print("terminal  ", describe(terminal))
print("others    ", describe(others))

section("4. additional_concat_attrs: custom attributes as tensors")
# A custom attribute named here is concatenated into a [B, 1] tensor like a reward.
# On-policy algorithms store their value estimates and advantages this way.
size, (reward, value, note) = buffer.sample_batch(
    3, sample_attrs=["reward", "value", "note"], additional_concat_attrs=["value"]
)
print("reward", describe(reward))
print("value ", describe(value))
print("note  ", describe(note))
# Only numbers can be joined into a tensor: asking for the strings fails.
try:
    buffer.sample_batch(3, sample_attrs=["note"], additional_concat_attrs=["note"])
    print("concatenating 'note': accepted")
except (ValueError, TypeError) as error:
    print(f"concatenating 'note': {type(error).__name__}: {error}")

section("5. sample_method: which transitions are drawn")
# Rewards equal the step numbers, so they show which transitions were picked.
for method, batch_size in [("random_unique", 4), ("random_unique", 10), ("random", 10), ("all", 2)]:
    size, (reward,) = buffer.sample_batch(batch_size, sample_method=method, sample_attrs=["reward"])
    print(
        f"{method!r:16} batch_size={batch_size:2d} -> size {size:2d}, steps {reward.view(-1).int().tolist()}"
    )
# "random_unique" never repeats a transition and gives at most what is stored; "random"
# draws with replacement, so it always returns batch_size; "all" returns everything,
# oldest first, whatever batch_size says.


def newest(buffer, batch_size):
    """A sample method of our own: the ``batch_size`` newest transitions.

    Positions count from the oldest stored transition (0); return ``(size, positions)``.
    """
    size = min(batch_size, buffer.size())
    return size, list(range(buffer.size() - size, buffer.size()))


size, (reward,) = buffer.sample_batch(2, sample_method=newest, sample_attrs=["reward"])
print(f"custom method 'newest'          -> size {size:2d}, steps {reward.view(-1).int().tolist()}")

section("6. sample_attrs: order, defaults and unknown names")
size, batch = buffer.sample_batch(2, sample_method="all")
print(
    "no sample_attrs: every attribute in stored order ->",
    len(batch),
    "values:",
    buffer.attribute_names,
)
size, batch = buffer.sample_batch(2, sample_attrs=["terminal", "reward"])
print("['terminal', 'reward'] ->", describe(list(batch)))
# A name the buffer does not know is skipped without an error, so the tuple is shorter
# than the list asked for: check the spelling of your attribute names.
size, batch = buffer.sample_batch(2, sample_attrs=["reward", "rewards"])
print("['reward', 'rewards'] -> a tuple of", len(batch), "value(s):", describe(list(batch)))

section("7. Every transition in a buffer has the same layout")
mismatches = {
    "state stored under another key": {"state": {"obs": torch.zeros(1, 3)}},
    "state of another shape": {"state": {"state": torch.zeros(1, 4)}},
}
for what, change in mismatches.items():
    step = {
        "state": {"state": torch.zeros(1, 3)},
        "action": {"action": torch.tensor([[0]])},
        "next_state": {"state": torch.zeros(1, 3)},
        "reward": 0.0,
        "terminal": False,
        "value": 0.0,
        "note": "",
        **change,
    }
    try:
        buffer.append(step)
        print(f"{what}: accepted")
    except ValueError as error:
        print(f"{what}: ValueError: {error}")

section("8. An empty buffer")
print("Buffer(10).sample_batch(4) ->", Buffer(10).sample_batch(4))
