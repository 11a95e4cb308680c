"""One contract suite over every algorithm class of ``machin.frame.algorithms``.

The classes come from the package's ``__all__``; how to build and drive each comes from
the ``CONTRACT_CASES`` of its own test file (see ``contract.py``). Adding an algorithm
needs no edit here: a class without a case fails every contract, saying where to add it.
The distributed classes' cases run together in one process of a one-member RPC world.
"""

import pytest

from machin.frame.algorithms.base import TorchFramework
from tests.multiprocess import run_ranks

from .contract import (
    CONTRACTS,
    algorithm_classes,
    applies,
    broken,
    case_for,
    collect_cases,
    run_in_world,
)

CLASSES = algorithm_classes()
CASES = collect_cases()
WORLD_TIMEOUT = 150


def _params(contract):
    """One parameter per class the contract applies to; classes needing a world are marked, and so are
    the contracts a case declares broken by a reported library bug."""
    params = []
    for cls in CLASSES:
        if not applies(contract, cls):
            continue
        case = CASES[cls][0] if cls in CASES else None
        marks = []
        if case is not None and case.world:
            marks.append(pytest.mark.multiprocess)
        if case is not None and contract in case.known_failures:
            marks.append(pytest.mark.xfail(strict=True, reason=case.known_failures[contract]))
        params.append(pytest.param(cls, id=cls.__name__, marks=marks))
    return params


@pytest.fixture(scope="module")
def world_outcomes():
    """Runs, on first use, every contract of every world case in one one-member world."""
    outcomes = {}

    def get(name, contract):
        if not outcomes:
            jobs = [
                (cls.__name__, c)
                for cls in CLASSES
                if cls in CASES and CASES[cls][0].world
                for c in CONTRACTS
                if applies(c, cls)
            ]
            try:
                outcomes.update(run_ranks(run_in_world, 1, args=(jobs,), timeout=WORLD_TIMEOUT)[0])
            except (
                Exception
            ) as error:  # the world failed as a whole: every world contract fails with it
                outcomes.update(
                    {job: f"the world of the distributed cases failed:\n{error}" for job in jobs}
                )
        return outcomes[(name, contract)]

    return get


def check(contract, cls, tmp_path, world_outcomes):
    """``None`` when ``cls`` keeps ``contract``, else how it broke it."""
    case = case_for(cls)
    failure = (
        world_outcomes(cls.__name__, contract)
        if case.world
        else broken(contract, cls, case, str(tmp_path))
    )
    return None if failure is None else f"{cls.__name__} broke the {contract} contract:\n{failure}"


def test_the_suite_covers_every_exported_algorithm():
    names = {cls.__name__ for cls in CLASSES}
    assert {"DQN", "DDPG", "A2C", "SAC", "MADDPG", "IMPALA", "ARS"} <= names
    assert "TorchFramework" not in names
    assert set(CASES) <= set(CLASSES), (
        "a contract case names a class machin.frame.algorithms does not export"
    )


def test_a_class_without_a_case_fails_naming_the_file_to_add_it_to():
    new_variant = type(
        "NewVariant", (TorchFramework,), {"__module__": "machin.frame.algorithms.new_variant"}
    )
    with pytest.raises(
        AssertionError,
        match=r"NewVariant has no contract case: add CONTRACT_CASES = "
        r"\{NewVariant: ContractCase\(\.\.\.\)\} to its test file "
        r"tests/frame/algorithms/test_new_variant\.py",
    ):
        case_for(new_variant)


@pytest.mark.parametrize("cls", _params("save_load"))
def test_save_then_load_acts_identically(cls, tmp_path, world_outcomes):
    assert check("save_load", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("extra_keyword"))
def test_an_unknown_keyword_warns_and_is_ignored(cls, tmp_path, world_outcomes):
    assert check("extra_keyword", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("defaults"))
def test_an_instance_holds_its_documented_defaults(cls, tmp_path, world_outcomes):
    assert check("defaults", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("gradients"))
def test_each_loss_reaches_only_the_networks_it_trains(cls, tmp_path, world_outcomes):
    assert check("gradients", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("targets"))
def test_targets_stay_frozen_until_their_update(cls, tmp_path, world_outcomes):
    assert check("targets", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("non_finite_loss"))
def test_an_update_with_a_non_finite_loss_changes_no_network(cls, tmp_path, world_outcomes):
    assert check("non_finite_loss", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("inputs"))
def test_inputs_are_not_changed(cls, tmp_path, world_outcomes):
    assert check("inputs", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("bad_state"))
def test_acting_on_nan_or_numpy_states_raises_machins_error(cls, tmp_path, world_outcomes):
    assert check("bad_state", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("modes"))
def test_networks_act_in_evaluation_mode(cls, tmp_path, world_outcomes):
    assert check("modes", cls, tmp_path, world_outcomes) is None


@pytest.mark.parametrize("cls", _params("fused_adam"))
def test_adam_optimizers_are_built_fused(cls, tmp_path, world_outcomes):
    assert check("fused_adam", cls, tmp_path, world_outcomes) is None
