"""Every public name of Machin 0.3.4 is importable from its 0.3.4 path with a compatible
signature, or is listed, with its reason, in the exceptions table of docs/migrating.rst."""

import json

from tests.compat.parity import INVENTORY, compare_signature, documented_exceptions, report


def test_inventory_covers_the_whole_0_3_4_package():
    inventory = json.loads(INVENTORY.read_text())
    assert "machin.frame.algorithms.dqn" in inventory
    assert inventory["machin.frame.algorithms"].keys() >= {
        "DQN",
        "DQNPer",
        "RAINBOW",
        "ARS",
        "MADDPG",
        "IMPALA",
    }
    assert sum(len(entries) for entries in inventory.values()) >= 200


def test_every_0_3_4_name_is_compatible_or_documented():
    inventory = json.loads(INVENTORY.read_text())
    exceptions = documented_exceptions()
    results, compatible, excepted, failing = report(inventory, exceptions)
    assert not failing, "incompatible with 0.3.4 and not in docs/migrating.rst:\n" + "\n".join(
        f"{name}: {problem}" for name, problem in failing
    )
    # every documented exception is still needed and carries a reason
    still_needed = {name for name, _ in excepted}
    assert set(exceptions) == still_needed, (
        f"stale entries: {sorted(set(exceptions) - still_needed)}"
    )
    assert all(len(reason) > 20 for reason in exceptions.values())
    assert len(compatible) + len(excepted) == len(results)


def test_the_comparison_catches_what_breaks_a_0_3_4_call():
    import inspect

    def params(fn):
        return list(inspect.signature(fn).parameters.values())

    reference = [
        ["a", "positional_or_keyword", "<required>"],
        ["b", "positional_or_keyword", "1"],
        ["_", "var_positional", "<required>"],
        ["__", "var_keyword", "<required>"],
    ]

    def same(a, b=1, *_, **__):
        pass

    def renamed(a, c=1, *_, **__):
        pass

    def strict(a, b=1):
        pass

    def new_default(a, b=2, *_, **__):
        pass

    def new_required(a, b=1, *_, c, **__):
        pass

    assert compare_signature(reference, params(same)) == []
    assert "positional argument 2 is 'c', 0.3.4 had 'b'" in compare_signature(
        reference, params(renamed)
    )
    assert compare_signature(reference, params(strict)) == [
        "extra positional arguments (*_) are refused",
        "extra keyword arguments (**__) are refused",
    ]
    assert compare_signature(reference, params(new_default)) == ["default of 'b' is 2, 0.3.4 had 1"]
    assert compare_signature(reference, params(new_required)) == ["new required argument 'c'"]
