"""The sample-efficiency benchmark runs end to end on tiny budgets.

No timing and no learning claim: these runs are far too short to learn. They keep the
harness (the zoo's settings written as machin code, the trainer options it uses, the
evaluation protocol and the report) working as the library changes.
"""

import dataclasses
import json
import os
import sys
import types

import pytest
import torch

from benchmarks import sample_efficiency
from tests.multiprocess import no_children_left  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """A run sets one torch thread for itself; give the other tests of this worker theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "task, scale", [("dqn", 0.04), ("ppo", 0.02), ("sac", 0.02), ("td3", 0.02)]
)
def test_each_task_trains_evaluates_and_reports(task, scale):
    run = sample_efficiency.run_seed(task, 0, steps_scale=scale, final_episodes=1)
    budget = round(sample_efficiency.TASKS[task].steps * scale)
    assert run["task"] == task and run["budget"] == budget and run["steps_taken"] >= budget
    assert run["eval_steps"] == list(range(1000, budget + 1, 1000))  # one evaluation per 1000 steps
    assert len(run["eval_returns"]) == len(run["eval_steps"])
    assert isinstance(run["final_eval"], float) and run["cpu_seconds"] > 0
    if task == "dqn":  # 1000 random steps, then the network: both stored
        assert run["steps_taken"] >= 2000


def test_fresh_evaluation_starts_differ_between_evaluations():
    sample_efficiency.run_seed("dqn", 0, steps_scale=0.02, eval_starts="fresh")
    assert sample_efficiency._eval_seed(3, 1, 0) != sample_efficiency._eval_seed(3, 2, 0)
    sample_efficiency.run_seed("dqn", 0, steps_scale=0.02)
    assert (
        sample_efficiency._eval_seed(3, 1, 0) == sample_efficiency._eval_seed(3, 2, 0) == 3 + 10**6
    )


def test_dqn_mode_reaches_the_dqn_task(monkeypatch, capsys):
    modes = []

    class RecordingDQN(sample_efficiency.DQN):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            modes.append(self.mode)

    monkeypatch.setattr(sample_efficiency, "DQN", RecordingDQN)
    sample_efficiency.main(
        [
            "--tasks",
            "dqn",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--steps-scale",
            "0.02",
            "--dqn-mode",
            "double",
        ]
    )
    assert modes == ["double"] and "DQN mode double" in capsys.readouterr().out
    sample_efficiency.run_seed("dqn", 0, steps_scale=0.02)
    assert modes == ["double", "fixed_target"]  # SB3's rule unless asked
    with pytest.raises(SystemExit):
        sample_efficiency.main(["--dqn-mode", "vanilla"])


def test_the_command_line_writes_the_table_and_the_json(tmp_path, capsys):
    path = tmp_path / "runs.json"
    rows = sample_efficiency.main(
        [
            "--tasks",
            "dqn",
            "--seeds",
            "2",
            "--workers",
            "1",
            "--steps-scale",
            "0.02",
            "--final-episodes",
            "2",
            "--json",
            str(path),
        ]
    )
    out = capsys.readouterr().out
    assert "dqn seed 0" in out and "dqn seed 1" in out and "(2 episodes:" in out
    assert (
        rows[0]["seeds"] == 2 and rows[0]["median_steps"] is None
    )  # 1000 random steps reach nothing
    saved = json.loads(path.read_text())
    assert [r["seed"] for r in saved["runs"]] == [0, 1] and saved["rows"][0]["task"] == "dqn"
    with pytest.raises(SystemExit):
        sample_efficiency.main(["--final-episodes", "-1"])


@pytest.mark.parametrize("task, scale", [("qrdqn", 0.022), ("tqc", 0.0075), ("crossq", 0.0075)])
def test_the_sb3_contrib_tasks_train_evaluate_and_count_their_cpu(task, scale, monkeypatch):
    monkeypatch.setattr(sample_efficiency, "EVAL_EVERY", 100)  # evaluations within a tiny budget
    run = sample_efficiency.run_seed(task, 0, steps_scale=scale, eval_episodes=1)
    budget = round(sample_efficiency.TASKS[task].steps * scale)  # 128 / 128 / 100 updates
    assert run["library"] == "machin" and run["steps_taken"] >= budget
    assert run["eval_steps"] == list(range(100, budget + 1, 100))
    assert len(run["eval_returns"]) == len(run["eval_steps"]) and run["final_return"] is not None
    assert 0 < run["eval_cpu_seconds"] < run["cpu_seconds"]
    expected = 1000 * (run["cpu_seconds"] - run["eval_cpu_seconds"]) / run["steps_taken"]
    assert run["train_cpu_ms_per_step"] == pytest.approx(expected)


@pytest.mark.parametrize("task", ["qrdqn", "tqc"])
def test_a_run_stops_at_the_evaluation_that_reaches_the_threshold(task, monkeypatch):
    monkeypatch.setattr(sample_efficiency, "EVAL_EVERY", 100)
    reachable = dataclasses.replace(sample_efficiency.TASKS[task], threshold=-1e9)
    monkeypatch.setitem(sample_efficiency.TASKS, task, reachable)
    run = sample_efficiency.run_seed(
        task, 0, steps_scale=0.05, eval_episodes=1, stop_at_threshold=True
    )
    assert run["steps_to_threshold"] == 100 and run["steps_taken"] == 100
    assert run["eval_steps"] == [100] and run["stopped_at_threshold"]


def test_without_the_option_a_run_goes_on_past_the_threshold(monkeypatch):
    monkeypatch.setattr(sample_efficiency, "EVAL_EVERY", 100)
    reachable = dataclasses.replace(sample_efficiency.TASKS["qrdqn"], threshold=-1e9)
    monkeypatch.setitem(sample_efficiency.TASKS, "qrdqn", reachable)
    run = sample_efficiency.run_seed("qrdqn", 0, steps_scale=0.006, eval_episodes=1)
    assert run["steps_to_threshold"] == 100 and run["steps_taken"] >= 300
    assert run["eval_steps"] == [100, 200, 300] and not run["stopped_at_threshold"]


def test_the_machin_trainer_resets_evaluations_with_the_benchmarks_seeds():
    seed_of = sample_efficiency._Trainer.evaluation_seed
    fresh = sample_efficiency._FRESH_STARTS
    try:
        sample_efficiency._FRESH_STARTS = True
        trainer = types.SimpleNamespace(seed=3, final=False, evaluations=2)
        assert seed_of(trainer, 1) == 3 + 10**6 + 1 + 2000
        trainer.final = True  # the final evaluation: starts no evaluation used
        assert seed_of(trainer, 1) == 3 + 2 * 10**6 + 1
        assert seed_of(types.SimpleNamespace(seed=None), 1) is None
    finally:
        sample_efficiency._FRESH_STARTS = fresh


def test_both_libraries_alternate_seed_by_seed_and_a_bad_name_is_refused():
    options = (1.0, 5, "same", 0, "fixed_target", True)
    jobs = sample_efficiency._jobs(["qrdqn", "crossq"], 2, "both", options)
    assert [(job[0], job[1], job[4]) for job in jobs] == [
        ("crossq", 0, "machin"),
        ("crossq", 0, "sb3"),
        ("crossq", 1, "machin"),
        ("crossq", 1, "sb3"),
        ("qrdqn", 0, "machin"),
        ("qrdqn", 0, "sb3"),
        ("qrdqn", 1, "machin"),
        ("qrdqn", 1, "sb3"),
    ]
    assert all(job[-1] is True for job in jobs)  # stop_at_threshold reaches run_seed
    with pytest.raises(ValueError, match="library must be 'machin' or 'sb3', got 'sb4'"):
        sample_efficiency.run_seed("qrdqn", 0, library="sb4")
    with pytest.raises(ValueError, match="name must be one of .*got 'iqn'"):
        sample_efficiency.run_seed("iqn", 0)


def test_without_sb3_contrib_its_tasks_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sb3_contrib", None)  # as if not installed: import raises
    with pytest.raises(SystemExit, match="task 'tqc' needs sb3-contrib importable"):
        sample_efficiency.run_seed("tqc", 0, library="sb3")


def _fake_run(task, library, seed, steps, ms_per_step):
    return {
        "task": task,
        "library": library,
        "seed": seed,
        "budget": 50_000,
        "steps_to_threshold": steps,
        "final_return": 500.0,
        "cpu_seconds": 10.0,
        "train_cpu_ms_per_step": ms_per_step,
    }


def test_the_comparison_gives_the_ratios_and_the_target_of_issue_45():
    runs = [
        _fake_run("qrdqn", "machin", 0, 20_000, 1.0),
        _fake_run("qrdqn", "machin", 1, 30_000, 1.2),
        _fake_run("qrdqn", "machin", 2, None, 1.1),
        _fake_run("qrdqn", "sb3", 0, 10_000, 2.0),
        _fake_run("qrdqn", "sb3", 1, 25_000, 2.2),
        _fake_run("qrdqn", "sb3", 2, 40_000, 2.4),
        _fake_run("tqc", "machin", 0, 3_000, 3.0),
        _fake_run("tqc", "sb3", 0, 3_000, 2.0),
        _fake_run("crossq", "machin", 0, 3_000, 3.0),  # no SB3 run: no comparison
    ]
    rows = sample_efficiency.summarize(runs)
    assert [(r["task"], r["library"]) for r in rows] == [
        ("qrdqn", "machin"),
        ("qrdqn", "sb3"),
        ("tqc", "machin"),
        ("tqc", "sb3"),
        ("crossq", "machin"),
    ]
    assert rows[0]["median_steps"] == 30_000 and rows[0]["steps"] == [20_000, 30_000, None]
    assert rows[0]["train_cpu_ms_per_step"] == 1.1 and rows[0]["meets_target"] is None
    lines = sample_efficiency.comparison(rows)
    assert len(lines) == 4
    assert lines[2] == (
        "| qrdqn, CartPole-v1 (475) | 3 / 3 | 30,000 (20,000, 30,000, -) | "
        "25,000 (10,000, 25,000, 40,000) | 1.20 | 1.10 | 2.20 | 0.50 | no, yes |"
    )
    assert lines[3].endswith("| 1.00 | 3.00 | 2.00 | 1.50 | yes, no |")
    assert sample_efficiency.comparison(rows[:1]) == []


def test_the_versus_benchmark_without_stable_baselines3_says_so_and_stops(monkeypatch, capsys):
    from benchmarks import versus

    monkeypatch.setitem(
        sys.modules, "stable_baselines3", None
    )  # as if not installed: import raises
    assert versus.main() is None
    assert versus.SKIP_MESSAGE in capsys.readouterr().out


def test_the_target_table_sets_each_printed_ratio_against_its_target():
    from benchmarks.__main__ import target_table

    output = "\n".join(
        [
            "== buffers",
            "buffer append (dict): library 0.0100 ms, floor 0.0050 ms, ratio 2.00 (11 repeats)",
            "buffer append (dict, check_finite=False; info): library 0.0100 ms, floor 0.0050 ms, ratio 2.60 (11 repeats)",
            "update_priority(256) in 100k: library 0.2 ms, floor 0.1 ms, ratio 1.60 (11 repeats)",
            "DQN, CartPole-v1, loop (CPU time per step): library 1.5 ms, floor 1.4 ms, ratio 1.07 (21 repeats, median)",
            "DQN, CartPole-v1, loop (wall time per step): library 1.5 ms, floor 1.6 ms, ratio 0.94 (21 repeats, median)",
            "compiled SAC update vs eager floor: library 1 ms, floor 2 ms, ratio 0.50 (11 repeats, wall)",
            "compiled SAC update vs eager floor: library 1 ms, floor 1.2 ms, ratio 0.83 (11 repeats, wall)",
        ]
    )
    table = target_table(output)
    assert table[:2] == ["| row | target | ratio | met |", "| --- | --- | --- | --- |"]
    rows = {line for line in table[2:]}
    assert "| buffer append (dict) | <= 1.5 | 2.00 | no |" in rows
    assert not any("check_finite=False" in line for line in rows)  # an info row, not the target's
    assert "| update_priority(256) in 100k | <= 1.5 | 1.60 | no |" in rows
    assert "| DQN, CartPole-v1, loop (CPU time per step) | <= 1.15 | 1.07 | yes |" in rows
    assert not any("wall time" in line for line in rows)
    assert {
        "| compiled SAC update vs eager floor | <= 0.7 | 0.50 | yes |",
        "| compiled SAC update vs eager floor | <= 0.7 | 0.83 | no |",
    } <= rows
    assert "| compiled PPO update | <= 0.7 | not run | - |" in rows
    assert len(table) == 2 + 5 + 8  # 5 ratios of 4 targets found, 8 targets not run
    assert (
        len(target_table(output, every_module=False)) == 2 + 5
    )  # some modules only: found rows only
    assert (
        target_table(
            "== safe_call\nsafe_call: library 1 ms, floor 1 ms, ratio 1.00 (9 repeats)", False
        )
        == []
    )


def test_the_original_benchmark_without_its_source_says_so_and_stops(monkeypatch, tmp_path, capsys):
    from benchmarks import original

    monkeypatch.setenv("MACHIN_ORIGINAL", str(tmp_path))  # no machin package there
    assert original.original_path() is None
    assert original.main() is None
    assert original.SKIP_MESSAGE in capsys.readouterr().out
    (tmp_path / "machin").mkdir()
    (tmp_path / "machin" / "__init__.py").write_text("")
    assert original.original_path() == tmp_path
    with pytest.raises(
        RuntimeError, match="process of its own"
    ):  # this process has machin imported
        original.import_original(tmp_path)


def test_the_original_benchmark_table_divides_the_two_ratios():
    from benchmarks import original

    lines = original.table(
        {"append": 1.25, "DQN loop": 1.1, "new path": 1.0}, {"append": 25.0, "DQN loop": 3.3}
    )
    assert lines[2:] == ["| append | 1.25 | 25.00 | 20.0x |", "| DQN loop | 1.10 | 3.30 | 3.0x |"]


def test_the_stand_ins_of_missing_modules_accept_what_the_original_does_with_them():
    from benchmarks.original import _Inert, _InertModule

    module = _InertModule("colorlog")
    formatter = module.ColoredFormatter(
        "%(message)s", log_colors={"INFO": "green"}
    )  # built at import time
    formatter.format(object()).anything()

    class Env(_InertModule("gym").Env):  # subclassed at import time
        pass

    assert isinstance(Env().reset(seed=0), _Inert)
    with pytest.raises(AttributeError):  # dunder lookups (hasattr, copy, pickle) see a plain module
        assert module.__version__ is None


def test_a_benchmark_child_prints_live_returns_its_result_and_is_killed_when_it_hangs(capsys):
    from benchmarks.original import run_child

    talk = "print('first'); print('RESULT ' + '{\"append\": 1.5}'); print('last')"
    assert run_child([sys.executable, "-c", talk], "  [side] ", timeout=60) == {"append": 1.5}
    assert capsys.readouterr().out.splitlines() == ["  [side] first", "  [side] last"]
    with pytest.raises(RuntimeError, match="exit 3"):
        run_child(
            [sys.executable, "-c", "import sys; print('RESULT {}'); sys.exit(3)"], "", timeout=60
        )
    with pytest.raises(RuntimeError, match="exit 0"):  # finished without a result
        run_child([sys.executable, "-c", "print('nothing')"], "", timeout=60)
    with pytest.raises(RuntimeError, match="killed after 1 s"):
        run_child(
            [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"],
            "",
            timeout=1,
        )
    assert "waiting" in capsys.readouterr().out


def test_scaling_local_reference_runs_the_learners_update_in_one_process():
    from benchmarks import scaling

    for algorithm in ("apex", "impala"):
        rates = scaling.local_updates(algorithm, 0.3)
        assert rates["updates_per_s"] > 0 and rates["cpu_ms_per_update"] > 0
        if algorithm == "apex":  # every update trains on one batch of 64 transitions
            assert rates["trained_per_s"] == pytest.approx(64 * rates["updates_per_s"])
        else:  # batches of 4 episodes, each at least one step long
            assert rates["trained_per_s"] >= 4 * rates["updates_per_s"]


def test_scaling_rows_give_the_efficiency_and_the_ratio_to_the_local_update():
    from benchmarks import scaling

    rates = {
        "steps_per_s": 300.0,
        "updates_per_s": 40.0,
        "cpu_ms_per_update": 5.0,
        "trained_per_s": 4000.0,
    }
    local = {"updates_per_s": 80.0, "cpu_ms_per_update": 4.0, "trained_per_s": 2000.0}
    row = scaling._row("impala", 2, rates, local, base=200.0)
    assert row["efficiency"] == pytest.approx(0.75)  # 300 steps/s from 2 samplers, 200 from one
    assert row["ratio"] == pytest.approx(0.5) and row["local_cpu_ms_per_update"] == 4.0
    assert row["ratio_per_transition"] == pytest.approx(2.0)  # its episodes were four times longer


def test_scaling_backend_option_names_what_a_ray_run_lacks():
    from benchmarks import scaling

    assert scaling._launcher("rpc") is scaling.launch
    with pytest.raises(ValueError, match=r"backend must be one of \('rpc', 'ray'\), got 'tcp'"):
        scaling._launcher("tcp")
    try:
        scaling._launcher("ray")
    except RuntimeError as error:  # a checkout without the Ray transport
        assert "backend 'ray' cannot run here: missing" in str(error)
    with pytest.raises(SystemExit):
        scaling.main(["--backend", "tcp"])


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.usefixtures("no_children_left")
def test_scaling_measures_a_learner_with_one_sampler():
    from benchmarks import scaling

    rates = scaling.measure("apex", 1, 0.5, warmup=0.5)
    assert (
        rates["updates_per_s"] > 0 and rates["steps_per_s"] > 0 and rates["cpu_ms_per_update"] > 0
    )


def test_scaling_learner_core_pins_the_local_reference_and_puts_the_cores_back():
    from benchmarks import scaling

    cores = os.sched_getaffinity(0)
    core = min(cores)
    seen = []
    scaling._pin_role(False, None)  # no pinning asked: nothing changes
    assert os.sched_getaffinity(0) == cores
    original = scaling._local_agent

    def spy(algorithm):
        seen.append(os.sched_getaffinity(0))
        return original(algorithm)

    scaling._local_agent = spy
    try:
        scaling.local_updates("apex", 0.05, learner_core=core)
    finally:
        scaling._local_agent = original
    assert seen == [{core}] and os.sched_getaffinity(0) == cores
    with pytest.raises(ValueError, match=r"learner_core must be one of the cores .* got 4096"):
        scaling.run(samplers=(1,), seconds=0.1, learner_core=4096)
