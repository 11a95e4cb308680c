"""Tests of machin.frame.algorithms.base.TorchFramework with a tiny two-network algorithm.

Checklist 6.9 items 91, 93-99, 101, 102, 105 and the save/load contract of section 3.8.
"""

import math
import os

import pytest
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from machin.frame.algorithms.base import TorchFramework, pack_result, split_output
from machin.frame.algorithms.options import Option, positive

from .nets import same


class Tiny(TorchFramework):
    """Two linear networks, each with its own SGD optimizer."""

    _is_top = ["net_a", "net_b"]
    _is_restorable = ["net_a", "net_b"]

    learning_rate = Option(1.0, positive, "Learning rate of both optimizers.")
    seed = Option(0, doc="Seed of the initial weights.")

    def __init__(self, *_, **options):
        super().__init__(*_, **options)
        torch.manual_seed(self.seed)
        self.net_a = nn.Linear(3, 2)
        self.net_b = nn.Linear(2, 1)
        self.opt_a = self._make_optimizer(torch.optim.SGD, self.net_a, self.learning_rate)
        self.opt_b = self._make_optimizer(torch.optim.SGD, self.net_b, self.learning_rate)

    def _optimizers(self):
        return [self.opt_a, self.opt_b]


class OnlyA(Tiny):
    _is_restorable = ["net_a"]


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    return same(list(a.state_dict().values()), list(b.state_dict().values()))


# -- class-level descriptions (item 91) -------------------------------------------------------
def test_top_and_restorable_are_readable_on_the_class():
    assert Tiny.get_top() == ["net_a", "net_b"]
    assert Tiny.get_restorable() == ["net_a", "net_b"]
    assert OnlyA.get_restorable() == ["net_a"]
    assert TorchFramework.get_restorable() == [] and TorchFramework.get_top() == []
    # Copies: changing the result does not change the class.
    Tiny.get_restorable().append("x")
    assert Tiny._is_restorable == ["net_a", "net_b"]


# -- save (items 93, 94) ----------------------------------------------------------------------
def test_save_writes_one_file_per_restorable_network(tmp_path):
    Tiny().save(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["net_a_0.manifest.json", "net_a_0.pt", "net_b_0.pt"]


def test_save_with_version_and_network_map(tmp_path):
    Tiny().save(str(tmp_path), network_map={"net_a": "first"}, version=1000)
    assert sorted(os.listdir(tmp_path)) == [
        "first_1000.manifest.json",
        "first_1000.pt",
        "net_b_1000.pt",
    ]


def test_save_creates_the_directory_and_writes_state_dicts(tmp_path):
    target = tmp_path / "deep" / "dir"
    algo = Tiny()
    algo.save(str(target), version=7)
    state = torch.load(target / "net_a_7.pt", weights_only=True)
    assert set(state) == {"weight", "bias"}
    assert torch.equal(state["weight"], algo.net_a.weight)


def test_save_only_the_restorable_networks(tmp_path):
    OnlyA().save(str(tmp_path), version=3)
    assert sorted(os.listdir(tmp_path)) == ["net_a_3.manifest.json", "net_a_3.pt"]


def test_save_rejects_a_bad_version(tmp_path):
    with pytest.raises(ValueError, match="version must be a non-negative integer, got -1"):
        Tiny().save(str(tmp_path), version=-1)


def test_network_map_with_unknown_name_is_ignored_with_a_warning(tmp_path):
    with pytest.warns(
        UserWarning,
        match=r"network_map names \['net_c'\], which Tiny does not save; they are ignored",
    ):
        Tiny().save(str(tmp_path), network_map={"net_c": "c"})
    assert sorted(os.listdir(tmp_path)) == ["net_a_0.manifest.json", "net_a_0.pt", "net_b_0.pt"]
    with pytest.warns(UserWarning, match=r"restorable networks are \['net_a'\]"):
        OnlyA().load(str(tmp_path), network_map={"net_b": "b"})


# -- load (items 95-99) -------------------------------------------------------------------------
def test_save_then_load_restores_the_weights_into_the_same_objects(tmp_path):
    saved = Tiny(seed=1)
    saved.save(str(tmp_path))
    loaded = Tiny(seed=2)
    net_a = loaded.net_a
    assert not same_weights(saved.net_a, loaded.net_a)
    loaded.load(str(tmp_path))
    assert loaded.net_a is net_a
    assert same_weights(saved.net_a, loaded.net_a) and same_weights(saved.net_b, loaded.net_b)
    x = torch.randn(4, 3)
    assert torch.equal(saved.net_b(saved.net_a(x)), loaded.net_b(loaded.net_a(x)))


def test_load_with_network_map(tmp_path):
    saved = Tiny(seed=1)
    saved.save(str(tmp_path), network_map={"net_a": "first", "net_b": "second"}, version=5)
    loaded = Tiny(seed=2)
    loaded.load(str(tmp_path), network_map={"net_a": "first", "net_b": "second"})
    assert same_weights(saved.net_a, loaded.net_a) and same_weights(saved.net_b, loaded.net_b)


def test_load_picks_the_latest_version_common_to_all_networks(tmp_path):
    # net_a has versions {0, 100, 1000}, net_b has {0, 100}: version 100 is loaded.
    v0, v100, v1000 = Tiny(seed=10), Tiny(seed=11), Tiny(seed=12)
    v0.save(str(tmp_path), version=0)
    v100.save(str(tmp_path), version=100)
    v1000.save(str(tmp_path), version=1000)
    os.remove(tmp_path / "net_b_1000.pt")
    loaded = Tiny(seed=3)
    loaded.load(str(tmp_path))
    assert same_weights(loaded.net_a, v100.net_a) and same_weights(loaded.net_b, v100.net_b)


def test_load_a_specific_version(tmp_path):
    v0, v100 = Tiny(seed=10), Tiny(seed=11)
    v0.save(str(tmp_path), version=0)
    v100.save(str(tmp_path), version=100)
    loaded = Tiny(seed=3)
    loaded.load(str(tmp_path), version=0)
    assert same_weights(loaded.net_a, v0.net_a) and same_weights(loaded.net_b, v0.net_b)


def test_missing_version_falls_back_to_the_latest_common_one(tmp_path, warnings_logged):
    v0, v100 = Tiny(seed=10), Tiny(seed=11)
    v0.save(str(tmp_path), version=0)
    v100.save(str(tmp_path), version=100)
    os.remove(tmp_path / "net_b_100.pt")
    os.remove(tmp_path / "net_a_100.manifest.json")  # as written by earlier releases (no manifest)
    loaded = Tiny(seed=3)
    loaded.load(str(tmp_path), version=100)  # net_b lacks 100: fall back to 0
    assert same_weights(loaded.net_a, v0.net_a) and same_weights(loaded.net_b, v0.net_b)
    loaded.load(str(tmp_path), version=55)  # nobody has 55
    assert same_weights(loaded.net_a, v0.net_a)
    assert any("version 100 is missing" in m for m in warnings_logged)
    assert any("version 55 is missing" in m for m in warnings_logged)


def test_files_without_a_numeric_version_are_ignored(tmp_path):
    saved = Tiny(seed=1)
    saved.save(str(tmp_path), version=2)
    torch.save(Tiny(seed=9).net_a.state_dict(), tmp_path / "net_a.pt")
    torch.save(Tiny(seed=9).net_a.state_dict(), tmp_path / "net_a_final.pt")
    (tmp_path / "notes.txt").write_text("not a model")
    loaded = Tiny(seed=3)
    loaded.load(str(tmp_path))
    assert same_weights(loaded.net_a, saved.net_a)


def test_load_without_a_common_version_raises(tmp_path):
    Tiny().save(str(tmp_path), version=1)
    os.remove(tmp_path / "net_b_1.pt")
    with pytest.raises(RuntimeError, match="Cannot find a valid version for all models"):
        Tiny().load(str(tmp_path))


def test_load_from_a_missing_directory_raises(tmp_path):
    with pytest.raises(RuntimeError, match="does not exist"):
        Tiny().load(str(tmp_path / "nowhere"))


@pytest.mark.filterwarnings("ignore:for weight:UserWarning", "ignore:for bias:UserWarning")
def test_load_keeps_the_devices_of_the_existing_networks(tmp_path):
    # Saved from CPU, loaded into networks living elsewhere (meta stands in for an accelerator).
    Tiny(seed=1).save(str(tmp_path))
    loaded = Tiny(seed=2)
    loaded.net_a.to("meta")
    loaded.load(str(tmp_path))
    assert loaded.net_a.weight.device.type == "meta"
    assert loaded.net_b.weight.device.type == "cpu"


def test_load_runs_the_post_load_hook(tmp_path):
    calls = []

    class Hooked(Tiny):
        def _post_load(self):
            calls.append(self.net_a.weight.clone())

    saved = Tiny(seed=1)
    saved.save(str(tmp_path))
    Hooked(seed=2).load(str(tmp_path))
    assert len(calls) == 1 and torch.equal(calls[0], saved.net_a.weight)


def test_load_with_a_shape_mismatch_names_the_model(tmp_path):
    Tiny().save(str(tmp_path))
    wrong = Tiny()
    wrong.net_b = nn.Linear(5, 1)
    with pytest.raises(RuntimeError, match="net_b"):
        wrong.load(str(tmp_path))


# -- multiprocessing (item 101) ---------------------------------------------------------------
def test_enable_multiprocessing_moves_parameters_to_shared_memory():
    algo = Tiny()
    assert not algo.net_a.weight.is_shared()
    algo.enable_multiprocessing()
    for net in (algo.net_a, algo.net_b):
        assert all(p.is_shared() for p in net.parameters())


# -- learning-rate schedulers (item 102) ---------------------------------------------------------
def test_one_scheduler_per_optimizer_and_stepping_follows_the_function():
    algo = Tiny(
        lr_scheduler=LambdaLR,
        lr_scheduler_args=((lambda step: 0.5**step,), (lambda step: 1.0 / (step + 1),)),
        learning_rate=0.1,
    )
    assert len(algo._lr_schedulers) == 2
    assert algo._lr_schedulers[0].optimizer is algo.opt_a
    assert algo._lr_schedulers[1].optimizer is algo.opt_b
    for _ in range(2):
        algo.opt_a.step()  # an update, then the scheduler step, as the algorithms do
        algo.opt_b.step()
        algo.update_lr_scheduler()
    assert algo.opt_a.param_groups[0]["lr"] == pytest.approx(0.1 * 0.25)
    assert algo.opt_b.param_groups[0]["lr"] == pytest.approx(0.1 / 3)


def test_scheduler_keyword_arguments_are_passed_per_optimizer():
    algo = Tiny(
        lr_scheduler=torch.optim.lr_scheduler.StepLR,
        lr_scheduler_kwargs=({"step_size": 1, "gamma": 0.5}, {"step_size": 1, "gamma": 0.1}),
        learning_rate=1.0,
    )
    algo.opt_a.step()
    algo.opt_b.step()
    algo.update_lr_scheduler()
    assert algo.opt_a.param_groups[0]["lr"] == pytest.approx(0.5)
    assert algo.opt_b.param_groups[0]["lr"] == pytest.approx(0.1)


def test_no_scheduler_means_stepping_does_nothing():
    algo = Tiny(learning_rate=0.3)
    algo.update_lr_scheduler()
    assert algo.opt_a.param_groups[0]["lr"] == 0.3


def test_flat_lr_scheduler_args_raise_a_helpful_error():
    # The 0.3.4 manual's ``lr_scheduler_args=(f,)`` cannot work: each optimizer needs a tuple.
    def f(step):
        return 1.0

    class One(Tiny):
        def _optimizers(self):
            return [self.opt_a]

    with pytest.raises(
        ValueError,
        match=r"one tuple of arguments per optimizer \(1 here\), e\.g\. \(\(lr_func,\),\)",
    ):
        One(lr_scheduler=LambdaLR, lr_scheduler_args=(f,))
    One(lr_scheduler=LambdaLR, lr_scheduler_args=((f,),))  # the correct form works


def test_scheduler_argument_count_must_match_the_optimizers():
    with pytest.raises(ValueError, match=r"per optimizer \(2 here\)"):
        Tiny(lr_scheduler=LambdaLR, lr_scheduler_args=((lambda s: 1.0,),))
    with pytest.raises(
        ValueError, match=r"lr_scheduler_kwargs must hold one dict per optimizer \(2 here\)"
    ):
        Tiny(lr_scheduler=torch.optim.lr_scheduler.StepLR, lr_scheduler_kwargs=({"step_size": 1},))


# -- the optimizer step (item 105) --------------------------------------------------------------
def test_optimize_steps_only_the_given_optimizer():
    algo = Tiny(learning_rate=0.1)
    before_a = algo.net_a.weight.clone()
    before_b = algo.net_b.weight.clone()
    loss = algo.net_b(algo.net_a(torch.ones(4, 3))).sum()
    algo._optimize(loss, algo.opt_a, algo.net_a)
    assert not torch.equal(algo.net_a.weight, before_a)
    assert torch.equal(algo.net_b.weight, before_b)


def test_a_step_computes_gradients_only_for_what_it_steps():
    # net_a's loss runs through net_b (an actor's loss through the critic): net_b gets no
    # gradient, net_a exactly the one a full backward pass gives (a custom backward function
    # runs the full pass).
    lean, full = Tiny(learning_rate=0.1), Tiny(learning_rate=0.1)
    full.set_backward_function(lambda loss: loss.backward())
    x = torch.randn(5, 3)
    grads = {}
    for algo in (lean, full):
        algo.net_a.weight.register_hook(
            lambda grad, algo=algo: grads.setdefault(id(algo), grad.clone())
        )
        algo._optimize(algo.net_b(algo.net_a(x)).pow(2).sum(), algo.opt_a, algo.net_a)
    assert lean.net_b.weight.grad is None and lean.net_b.bias.grad is None
    assert full.net_b.weight.grad is not None
    assert torch.equal(grads[id(lean)], grads[id(full)])
    assert same_weights(lean.net_a, full.net_a) and same_weights(lean.net_b, full.net_b)


def test_a_step_of_a_network_without_trainable_parameters_runs_the_full_backward_pass():
    algo = Tiny()
    algo.net_a.requires_grad_(False)
    loss = algo.net_b(algo.net_a(torch.ones(2, 3))).sum()
    assert algo._optimize(loss, algo.opt_a, algo.net_a)  # backward(inputs=[]) would raise
    assert algo.net_b.weight.grad is not None


def test_tiny_gradient_max_bounds_the_step():
    free, clipped = Tiny(learning_rate=1.0), Tiny(learning_rate=1.0)
    x = torch.full((8, 3), 10.0)

    def step(algo, gradient_max):
        before = torch.cat([p.detach().clone().view(-1) for p in algo.net_a.parameters()])
        loss = algo.net_a(x).pow(2).sum()
        algo._optimize(loss, algo.opt_a, algo.net_a, gradient_max)
        after = torch.cat([p.detach().view(-1) for p in algo.net_a.parameters()])
        return (after - before).norm().item()

    unclipped_step = step(free, math.inf)
    clipped_step = step(clipped, 1e-3)
    assert unclipped_step > 1.0
    assert clipped_step <= 1e-3 * (1 + 1e-4)  # SGD with lr 1: the step is the clipped gradient
    assert clipped_step > 0


def test_gradient_max_accepts_a_parameter_list():
    algo = Tiny(learning_rate=1.0)
    before = algo.net_a.weight.clone()
    loss = algo.net_a(torch.full((8, 3), 10.0)).pow(2).sum()
    algo._optimize(loss, algo.opt_a, list(algo.net_a.parameters()), 1e-3)
    assert (algo.net_a.weight - before).norm().item() <= 1e-3 * (1 + 1e-4)


def test_set_backward_function_replaces_autograd_backward():
    algo = Tiny()
    seen = []

    def backward(loss):
        seen.append(loss.item())
        (loss * 0).backward()

    algo.set_backward_function(backward)
    before = algo.net_a.weight.clone()
    loss = algo.net_a(torch.ones(1, 3)).sum()
    algo._optimize(loss, algo.opt_a, algo.net_a)
    assert seen == [pytest.approx(loss.item())]
    assert torch.equal(algo.net_a.weight, before)  # zero gradient: no change


# -- result wrapping (item 112) -------------------------------------------------------------------
def test_single_result_comes_back_bare_and_extras_are_appended():
    action = torch.zeros(1, 1)
    assert pack_result(action) is action
    hidden = torch.ones(1, 4)
    assert pack_result(action, (hidden,)) == (action, hidden)
    assert pack_result((action, 0.5), (hidden,)) == (action, 0.5, hidden)


def test_split_output_separates_the_first_value():
    q = torch.zeros(1, 2)
    assert split_output(q) == (q, ())
    first, extras = split_output((q, "h", "c"))
    assert first is q and extras == ("h", "c")


def test_set_mode_switches_only_mode_sensitive_networks():
    from machin.frame.algorithms.base import TorchFramework

    plain = torch.nn.Sequential(torch.nn.Linear(2, 2))
    dropout = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    TorchFramework._set_mode(False, plain, dropout)
    assert plain.training  # nothing in it depends on the mode: left alone, which saves a tree walk
    assert not dropout.training and not dropout[1].training
    TorchFramework._set_mode(True, dropout)
    assert dropout[1].training
