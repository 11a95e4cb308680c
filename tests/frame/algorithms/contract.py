"""The contracts every algorithm class keeps, and how an algorithm's test file joins them.

``test_contract.py`` runs each contract below on every :class:`TorchFramework` subclass
that ``machin.frame.algorithms`` exports. What it needs to build and drive a class comes
from that class's own test file: a module-level mapping ::

    CONTRACT_CASES = {DQN: ContractCase(args=..., act=..., state=..., experience=..., trains=...)}

in any ``test_*.py`` (or ``contract_cases*.py``) module of this folder. The suite imports
those modules and finds the cases itself, so adding an algorithm is one library module and
one test file holding its case; a class without a case fails every contract. A case whose
class needs an RPC world (``world=True``) gets a :class:`WorldContext` as the argument of
``args`` and runs, with every other such case, in one process of a one-member world.

Contracts:

* save / load: a fresh instance that loads what another saved acts identically;
* extra keywords: an unknown constructor keyword warns :class:`ExtraArgumentsWarning` and
  is ignored (Machin 0.3.4 accepted and dropped them);
* defaults: constructed with only its required arguments, an instance holds the defaults of
  its signature (``tests/compat/test_parity.py`` checks those against 0.3.4's);
* gradients: each loss steps the networks it trains and leaves every other network as it
  was and without gradients, also those it passes through (the actor's loss through the
  critic: its backward pass computes gradients for the stepped networks only);
* targets: target networks stay frozen while ``update_target=False`` and move on update;
* non-finite loss: an update on experience whose rewards are NaN (stored past the store
  check) skips its steps and changes no network, target networks included (decision 14 of
  the design);
* inputs: acting, storing and updating change nothing the caller handed over;
* bad state: acting on a state with a NaN raises ``ValueError`` naming the state's key, and
  on numpy arrays instead of tensors a ``TypeError`` saying to convert them;
* modes: networks act in evaluation mode: a new instance's networks are in it, and an
  update leaves them in it (a batch-norm actor can act on one state before any update).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import itertools
import math
import os
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from machin.frame.algorithms.base import TorchFramework
from machin.frame.buffers import Buffer
from machin.frame.transition import TransitionBase
from machin.utils.compat import ExtraArgumentsWarning

from .nets import same

HERE = Path(__file__).parent
EXTRA_KEYWORD = "contract_unknown_option"


def _store_episode(agent: Any, experience: Any) -> None:
    agent.store_episode(experience)


def _update(agent: Any, **flags: bool) -> Any:
    return agent.update(**flags)


@dataclass(frozen=True)
class ContractCase:
    """How the contract suite builds and drives one algorithm class.

    Attributes:
        args: Returns fresh required constructor arguments (networks, optimizer, criterion,
            ...), drawn from torch's global generator. Takes a :class:`WorldContext` when
            ``world`` is set.
        act: ``act(agent, state)``: a deterministic act call (given torch's generator state)
            that uses the networks ``save`` writes, e.g. ``use_target=True`` where only the
            targets are saved. Its output is compared after a load.
        state: Returns the input of ``act`` (a state dict, or one per agent).
        experience: Returns what ``store`` takes: enough for ``update`` to train.
        trains: ``{update switch: names of the networks that loss steps}``; the switches of
            ``update`` not listed are turned off while one is tested (``None``: ``update()``
            without switches). Names are those of ``_is_top``.
        options: Keyword options that make a small, fast instance (``batch_size=8``, ...).
        store: ``store(agent, experience)``; default ``agent.store_episode(experience)``.
        update: ``update(agent, **switches)``; default ``agent.update(**switches)``.
        explore: Optional exploring act call, checked not to change its input.
        store_nan_rewards: ``store_nan_rewards(agent, experience)``: store ``experience`` with
            every reward NaN, past the store check. ``None``: the rewards are set to NaN and
            stored by ``store`` with the replay buffers' ``check_finite`` off.
        world: The class needs an RPC world (a distributed algorithm).
        known_failures: ``{contract: reason}`` for contracts the class breaks because of a
            reported library bug; the suite expects them to fail (``xfail(strict=True)``), so
            the fix makes the suite ask for the entry's removal.
    """

    args: Callable[..., tuple]
    act: Callable[[Any, Any], Any]
    state: Callable[[], Any]
    experience: Callable[[], Any]
    trains: Mapping[Optional[str], Sequence[str]]
    options: Mapping[str, Any] = field(default_factory=dict)
    store: Callable[[Any, Any], None] = _store_episode
    update: Callable[..., Any] = _update
    explore: Optional[Callable[[Any, Any], Any]] = None
    store_nan_rewards: Optional[Callable[[Any, Any], None]] = None
    world: bool = False
    known_failures: Mapping[str, str] = field(default_factory=dict)


class WorldContext:
    """What a distributed case's ``args`` may use inside the one-member world.

    Every call makes new groups and servers under fresh names, so instances never share them.
    """

    def __init__(self, world: Any):
        self.world = world
        self._count = itertools.count()

    def _name(self, kind: str) -> str:
        return f"contract_{kind}_{next(self._count)}"

    def group(self) -> Any:
        """A new RPC group of the whole world."""
        return self.world.create_rpc_group(self._name("group"), self.world.get_members())

    def model_servers(self, count: int = 1) -> tuple:
        from machin.frame.helpers import model_server_helper

        return model_server_helper(count, group_name=self._name("model_servers"))

    def grad_servers(
        self, creators: Sequence[Callable[[], nn.Module]], learning_rate: float = 1e-2
    ) -> tuple:
        from machin.frame.helpers import grad_server_helper

        return grad_server_helper(
            list(creators), learning_rate=learning_rate, group_name=self._name("grad_servers")
        )


# -- the classes and their cases ---------------------------------------------------------------
def algorithm_classes() -> List[type]:
    """Every algorithm class ``machin.frame.algorithms`` exports (its ``__all__``)."""
    package = importlib.import_module("machin.frame.algorithms")
    classes = []
    for name in package.__all__:
        obj = getattr(package, name)
        if isinstance(obj, type) and issubclass(obj, TorchFramework) and obj is not TorchFramework:
            classes.append(obj)
    return classes


_CASES: Optional[Dict[type, Tuple[ContractCase, str]]] = None
_IMPORT_ERRORS: Dict[str, str] = {}


def collect_cases() -> Dict[type, Tuple[ContractCase, str]]:
    """``{class: (case, file)}`` from ``CONTRACT_CASES`` of this folder's test modules."""
    global _CASES
    if _CASES is not None:
        return _CASES
    package = __name__.rsplit(".", 1)[0]
    cases: Dict[type, Tuple[ContractCase, str]] = {}
    paths = sorted(HERE.glob("test_*.py")) + sorted(HERE.glob("contract_cases*.py"))
    for path in paths:
        if path.stem == "test_contract":
            continue
        try:
            module = importlib.import_module(f"{package}.{path.stem}")
        except Exception as error:  # reported with the classes left without a case
            _IMPORT_ERRORS[path.name] = f"{type(error).__name__}: {error}"
            continue
        for cls, case in getattr(module, "CONTRACT_CASES", {}).items():
            if not isinstance(case, ContractCase):
                raise TypeError(
                    f"{path.name}: CONTRACT_CASES[{cls.__name__}] must be a ContractCase, "
                    f"got {type(case).__name__}"
                )
            if cls in cases:
                raise ValueError(
                    f"{cls.__name__} has contract cases in both {cases[cls][1]} and {path.name}"
                )
            cases[cls] = (case, path.name)
    _CASES = cases
    return cases


def case_for(cls: type) -> ContractCase:
    """The case of ``cls``; an ``AssertionError`` saying where to add it when there is none."""
    found = collect_cases().get(cls)
    broken = "".join(
        f"\n  {name} did not import: {error}" for name, error in _IMPORT_ERRORS.items()
    )
    assert found is not None, (
        f"{cls.__name__} has no contract case: add CONTRACT_CASES = {{{cls.__name__}: ContractCase(...)}} "
        f"to its test file tests/frame/algorithms/test_{cls.__module__.rsplit('.', 1)[-1]}.py{broken}"
    )
    return found[0]


def build(cls: type, case: ContractCase, ctx: Optional[WorldContext] = None, **options: Any) -> Any:
    args = case.args(ctx) if case.world else case.args()
    return cls(*args, **{**case.options, **options})


# -- networks ----------------------------------------------------------------------------------
def modules(value: Any) -> List[nn.Module]:
    """The modules under a ``_is_top`` attribute (a module, or nested lists of them)."""
    if isinstance(value, nn.Module) and not isinstance(value, nn.ModuleList):
        return [value]
    if isinstance(value, (list, tuple, nn.ModuleList)):
        return [m for item in value for m in modules(item)]
    return []


def network_parameters(agent: Any, name: str) -> List[torch.Tensor]:
    return [p.detach().clone() for m in modules(getattr(agent, name)) for p in m.parameters()]


def gradients_of(agent: Any, name: str) -> List[str]:
    """Names of the parameters of network ``name`` that hold a gradient."""
    return [
        f"{name}.{pname}"
        for m in modules(getattr(agent, name))
        for pname, p in m.named_parameters()
        if p.grad is not None
    ]


def target_names(cls: type) -> List[str]:
    """Networks of ``_is_top`` that are targets (``*_target``, ``*_targets``)."""
    return [n for n in cls._is_top if n.endswith(("_target", "_targets"))]


def online_of(target: str) -> str:
    """``qnet_target`` -> ``qnet``, ``actor_targets`` -> ``actors``."""
    return (
        target[: -len("_targets")] + "s"
        if target.endswith("_targets")
        else target[: -len("_target")]
    )


def update_switches(cls: type) -> List[str]:
    """The boolean ``update_*`` switches of ``cls.update``."""
    params = inspect.signature(cls.update).parameters.values()
    return [p.name for p in params if p.name.startswith("update_") and isinstance(p.default, bool)]


# -- inputs ------------------------------------------------------------------------------------
def snapshot(value: Any) -> Any:
    """A deep copy that tensors are cloned into (for :func:`assert_unchanged`)."""
    return copy.deepcopy(value)


def assert_unchanged(before: Any, after: Any, path: str = "input") -> None:
    """Fail naming the first place where ``after`` differs from the snapshot ``before``."""
    assert type(before) is type(after), (
        f"{path} changed type: {type(before).__name__} -> {type(after).__name__}"
    )
    if isinstance(before, torch.Tensor):
        assert (
            before.dtype == after.dtype
            and before.shape == after.shape
            and torch.equal(before, after)
        ), f"{path} changed: {before} -> {after}"
    elif isinstance(before, dict):
        assert list(before) == list(after), f"{path} changed keys: {list(before)} -> {list(after)}"
        for key in before:
            assert_unchanged(before[key], after[key], f"{path}[{key!r}]")
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after), f"{path} changed length: {len(before)} -> {len(after)}"
        for i, (b, a) in enumerate(zip(before, after)):
            assert_unchanged(b, a, f"{path}[{i}]")
    elif hasattr(before, "keys") and hasattr(before, "__getitem__"):  # Transition
        keys = list(before.keys())
        assert keys == list(after.keys()), f"{path} changed keys"
        for key in keys:
            assert_unchanged(before[key], after[key], f"{path}.{key}")
    else:
        assert before == after, f"{path} changed: {before!r} -> {after!r}"


def _outputs_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_outputs_equal(x, y) for x, y in zip(a, b))
        )
    return a == b


def _train(case: ContractCase, agent: Any, **switches: bool) -> Any:
    """Store the case's experience and update once; fail when the update trained nothing."""
    case.store(agent, case.experience())
    result = case.update(agent, **switches)
    assert result is not None, f"update({switches}) trained nothing on the case's experience"
    return result


def _act(case: ContractCase, agent: Any, state: Any, seed: int = 11) -> Any:
    torch.manual_seed(seed)
    with torch.no_grad():
        return case.act(agent, state)


def _same_setting(value: Any, default: Any) -> bool:
    """Equal, and a ``bool`` only equals a ``bool`` (``1 == True`` in Python)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    return value == default


def _plain(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, (bool, int, float, str))
        or (isinstance(value, tuple) and all(_plain(v) for v in value))
    )


# -- the contracts -----------------------------------------------------------------------------
def check_save_load(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    torch.manual_seed(0)
    agent = build(cls, case, ctx)
    for _ in range(2):  # online and target networks part
        _train(case, agent)
    agent.save(directory, version=3)
    restorable = cls.get_restorable()
    files = sorted(os.listdir(directory))
    for name in restorable:
        assert f"{name}_3.pt" in files, f"save wrote {files}, no {name}_3.pt"
    assert f"{restorable[0]}_3.manifest.json" in files, f"save wrote {files}, no manifest"

    torch.manual_seed(1)
    fresh = build(cls, case, ctx)
    with torch.no_grad():  # whatever the seeds give, start away from the saved networks
        for name in restorable:
            for p in (p for m in modules(getattr(fresh, name)) for p in m.parameters()):
                p.add_(0.5)
    state = case.state()
    fresh.load(directory)
    for name in restorable:
        assert same(network_parameters(fresh, name), network_parameters(agent, name)), (
            f"{name} was not loaded"
        )
    for target in target_names(cls):
        online = online_of(target)
        if target in restorable and online in cls._is_top and online not in restorable:
            assert same(network_parameters(fresh, online), network_parameters(agent, target)), (
                f"after load, {online} is not a copy of the loaded {target}"
            )
    expected, acted = _act(case, agent, state), _act(case, fresh, state)
    assert _outputs_equal(acted, expected), (
        f"the loaded instance acts differently:\n{acted}\nvs\n{expected}"
    )


def check_extra_keyword(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(0)
        agent = build(cls, case, ctx, **{EXTRA_KEYWORD: 1})
    messages = [str(w.message) for w in caught if issubclass(w.category, ExtraArgumentsWarning)]
    assert any(
        f"{cls.__name__}.__init__() does not use keyword argument(s) '{EXTRA_KEYWORD}'" in m
        for m in messages
    ), f"no ExtraArgumentsWarning naming {EXTRA_KEYWORD!r}; warnings: {messages}"
    assert not hasattr(agent, EXTRA_KEYWORD)
    torch.manual_seed(0)
    plain = build(cls, case, ctx)
    mine = {k: v for k, v in vars(agent).items() if _plain(v)}
    theirs = {k: v for k, v in vars(plain).items() if _plain(v)}
    assert mine == theirs, "the ignored keyword changed the instance's settings"


def check_defaults(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    agent = cls(*(case.args(ctx) if case.world else case.args()))
    checked, wrong = [], {}
    for p in inspect.signature(cls).parameters.values():
        if (
            p.default is inspect.Parameter.empty
            or not _plain(p.default)
            or not hasattr(agent, p.name)
        ):
            continue
        value = getattr(agent, p.name)
        if p.default is None and value is not None:
            continue  # "None: the constructor chooses" (replay_buffer, pool_size)
        checked.append(p.name)
        if not _same_setting(value, p.default):
            wrong[p.name] = (value, p.default)
    assert not wrong, f"attributes differ from the signature defaults (attribute, default): {wrong}"
    assert len(checked) >= 3, (
        f"only {checked} of the defaults are held as attributes of their names"
    )


def check_gradients(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    switches = update_switches(cls)
    if switches:  # every switch off: the update trains nothing
        torch.manual_seed(0)
        agent = build(cls, case, ctx)
        case.store(agent, case.experience())
        before = {name: network_parameters(agent, name) for name in cls._is_top}
        case.update(agent, **{s: False for s in switches})
        for name in cls._is_top:
            assert same(before[name], network_parameters(agent, name)), (
                f"update() with every switch off changed {name}"
            )
            assert not gradients_of(agent, name), (
                f"update() with every switch off left gradients on {name}"
            )
    for switch, trained in case.trains.items():
        torch.manual_seed(0)
        agent = build(cls, case, ctx)
        names = list(cls._is_top)
        before = {name: network_parameters(agent, name) for name in names}
        flags = {} if switch is None else {s: s == switch for s in switches}
        assert switch is None or switch in switches, (
            f"{cls.__name__}.update has no switch {switch!r}"
        )
        _train(case, agent, **flags)
        for name in names:
            changed = not same(before[name], network_parameters(agent, name))
            if name in trained:
                assert changed, f"update({flags}) did not change {name}, which it trains"
            else:
                assert not changed, f"update({flags}) changed {name}, which it does not train"
                assert not gradients_of(agent, name), (
                    f"update({flags}) left gradients on {gradients_of(agent, name)}"
                )


def check_targets(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    switches = update_switches(cls)
    assert "update_target" in switches, (
        f"{cls.__name__} has target networks but update() has no update_target"
    )
    torch.manual_seed(0)
    agent = build(cls, case, ctx)
    targets = target_names(cls)
    onlines = [online_of(t) for t in targets if online_of(t) in cls._is_top]
    before = {name: network_parameters(agent, name) for name in targets + onlines}
    frozen = {s: True for s in switches}
    frozen["update_target"] = False
    for _ in range(2):
        _train(case, agent, **frozen)
    for name in targets:
        assert same(before[name], network_parameters(agent, name)), (
            f"{name} moved with update_target=False"
        )
        assert not gradients_of(agent, name), (
            f"gradients reached the target network: {gradients_of(agent, name)}"
        )
    assert any(not same(before[name], network_parameters(agent, name)) for name in onlines), (
        "the online networks did not train either"
    )
    _train(case, agent)
    for name in targets:
        assert not same(before[name], network_parameters(agent, name)), (
            f"{name} did not move on its update"
        )


def _with_nan_rewards(experience: Any) -> Any:
    """``experience`` with every reward NaN: in the dicts and transitions of (nested) lists, or bare numbers."""
    if isinstance(experience, (list, tuple)):
        return type(experience)(_with_nan_rewards(item) for item in experience)
    if isinstance(experience, (dict, TransitionBase)) and "reward" in experience:
        experience["reward"] = math.nan  # a fresh object of case.experience()
        return experience
    return math.nan if isinstance(experience, float) else experience


def _store_nan_rewards(case: ContractCase, agent: Any) -> None:
    if case.store_nan_rewards is not None:
        case.store_nan_rewards(agent, case.experience())
        return
    buffers = [getattr(agent, "replay_buffer", None)] + list(
        getattr(agent, "replay_buffers", None) or []
    )
    for buffer in (b for b in buffers if isinstance(b, Buffer)):
        buffer.check_finite = False
    case.store(agent, _with_nan_rewards(case.experience()))


def _learned_state(agent: Any) -> Dict[str, List[torch.Tensor]]:
    """Copies of the parameters of every network, and of tensors learned outside them (SAC's ``log_alpha``)."""
    state = {name: network_parameters(agent, name) for name in type(agent)._is_top}
    state.update(
        {
            name: [value.detach().clone()]
            for name, value in vars(agent).items()
            if isinstance(value, torch.Tensor) and value.requires_grad
        }
    )
    return state


def check_non_finite_loss(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    torch.manual_seed(0)
    agent = build(cls, case, ctx)
    with (
        torch.no_grad()
    ):  # targets apart from their online networks, so that a soft update would show
        for p in (
            p
            for name in target_names(cls)
            for m in modules(getattr(agent, name))
            for p in m.parameters()
        ):
            p.add_(0.25)
    _store_nan_rewards(case, agent)
    before = _learned_state(agent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the first skipped step warns
        agent.update()  # not case.update: A3C's waits for the servers to apply gradients, which must not come
    assert getattr(agent, "skipped_updates", 0) >= 1, (
        "no step was skipped: the NaN rewards left every loss finite"
    )
    after = _learned_state(agent)
    changed = [name for name in before if not same(before[name], after[name])]
    assert not changed, f"an update whose loss was not finite changed {changed}"


def check_inputs(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    torch.manual_seed(0)
    agent = build(cls, case, ctx)
    state = case.state()
    kept = snapshot(state)
    _act(case, agent, state)
    assert_unchanged(kept, state, "state given to act")
    if case.explore is not None:
        case.explore(agent, state)
        assert_unchanged(kept, state, "state given to the exploring act")
    experience = case.experience()
    kept = snapshot(experience)
    case.store(agent, experience)
    assert_unchanged(kept, experience, "experience given to store")
    assert case.update(agent) is not None
    assert_unchanged(kept, experience, "stored experience, after update")


def _map_tensors(value: Any, change: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with ``change`` applied to every floating-point tensor in it (dicts, lists, tuples)."""
    if isinstance(value, torch.Tensor):
        return change(value) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _map_tensors(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, change) for v in value)
    return value


def _with_nan(tensor: torch.Tensor) -> torch.Tensor:
    poisoned = tensor.clone()
    poisoned.view(-1)[0] = float("nan")
    return poisoned


def check_bad_state(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    """Acting on NaN, or on numpy arrays, gets machin's error naming what to fix."""
    torch.manual_seed(0)
    agent = build(cls, case, ctx)
    state = case.state()
    acts = [("act", case.act)] + (
        [("exploring act", case.explore)] if case.explore is not None else []
    )
    for name, act in acts:
        try:
            act(agent, _map_tensors(state, _with_nan))
        except ValueError as error:
            assert "NaN or infinite value(s)" in str(error) and "state" in str(error), (
                f"{name}: {error}"
            )
        else:
            raise AssertionError(f"the {name} on a state holding NaN raised nothing")
        try:
            act(agent, _map_tensors(state, lambda t: t.numpy()))
        except TypeError as error:
            assert "numpy" in str(error) and "torch.as_tensor" in str(error), f"{name}: {error}"
        else:
            raise AssertionError(f"the {name} on numpy arrays raised nothing")


def check_fused_adam(
    cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]
) -> None:
    """Every Adam / AdamW the constructor builds is torch's fused one; other optimizers are built as given."""
    torch.manual_seed(0)
    agent = build(cls, case, ctx)
    optimizers = agent._optimizers()
    assert optimizers, f"{cls.__name__}._optimizers() lists no optimizer"
    for name, optimizer in enumerate(optimizers):
        adam = type(optimizer) in (torch.optim.Adam, torch.optim.AdamW)
        fused = [group["fused"] for group in optimizer.param_groups] + [
            optimizer.defaults.get("fused")
        ]
        assert all((f is True) if adam else not f for f in fused), (
            f"optimizer {name}: a {type(optimizer).__name__} with fused={fused} (Adam and AdamW fused, others not)"
        )


def _in_training_mode(agent: Any) -> List[str]:
    """The networks of ``agent`` marked mode-dependent by :func:`check_modes` that are in training mode."""
    return [
        name
        for name in type(agent)._is_top
        for module in modules(getattr(agent, name, None))
        if module.training and getattr(module, "mode_sensitive", False)
    ]


def check_modes(cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext]) -> None:
    """Networks act in evaluation mode: the networks given to the constructor in training mode
    (and declared mode-dependent, as a network with batch norm or dropout is) are in
    evaluation mode once the instance is built, and again after an update. (GAIL's actor and
    critic come inside an algorithm built before: that one's contract covers them.)"""
    torch.manual_seed(0)
    args = case.args(ctx) if case.world else case.args()
    for network in modules(list(args)):
        network.mode_sensitive = True
        network.train()
    agent = cls(*args, **case.options)
    training = _in_training_mode(agent)
    assert not training, f"networks left in training mode by the constructor: {training}"
    _act(case, agent, case.state())
    _train(case, agent)
    training = _in_training_mode(agent)
    assert not training, f"networks left in training mode by an update: {training}"


CONTRACTS: Dict[str, Callable[[type, ContractCase, str, Optional[WorldContext]], None]] = {
    "save_load": check_save_load,
    "extra_keyword": check_extra_keyword,
    "defaults": check_defaults,
    "gradients": check_gradients,
    "targets": check_targets,
    "non_finite_loss": check_non_finite_loss,
    "inputs": check_inputs,
    "bad_state": check_bad_state,
    "fused_adam": check_fused_adam,
    "modes": check_modes,
}


def applies(contract: str, cls: type) -> bool:
    if contract == "fused_adam":  # not A3C: its optimizers live on the gradient servers
        return cls._make_optimizer is TorchFramework._make_optimizer
    return contract != "targets" or bool(target_names(cls))


# -- the world of the distributed cases ---------------------------------------------------------
def broken(
    contract: str, cls: type, case: ContractCase, directory: str, ctx: Optional[WorldContext] = None
) -> Optional[str]:
    """``None`` when ``cls`` keeps ``contract``, else the traceback of how it broke it."""
    try:
        CONTRACTS[contract](cls, case, directory, ctx)
    except BaseException:  # noqa: B036 (reported as text, in this process or from a world)
        return traceback.format_exc()
    return None


def run_in_world(
    rank: int, jobs: Sequence[Tuple[str, str]]
) -> Dict[Tuple[str, str], Optional[str]]:
    """Run ``(class name, contract)`` jobs in a one-member world; a traceback per failed job."""
    import shutil
    import tempfile

    from machin.parallel.distributed import World

    classes = {cls.__name__: cls for cls in algorithm_classes()}
    world = World(rpc_timeout=30)
    ctx = WorldContext(world)
    outcomes: Dict[Tuple[str, str], Optional[str]] = {}
    try:
        for name, contract in jobs:
            directory = tempfile.mkdtemp(prefix=f"contract_{name}_")
            try:
                outcomes[(name, contract)] = broken(
                    contract, classes[name], case_for(classes[name]), directory, ctx
                )
            finally:
                shutil.rmtree(directory, ignore_errors=True)
    finally:
        world.stop()
    return outcomes
