"""The machinery of benchmarks/time_to_solve.py on tiny budgets, machin only (no peer installed)."""

import dataclasses
import os
import sys

import gymnasium as gym
import pytest

from benchmarks import time_to_solve as tts


def _record(library, seed, steps, wall, final=450.0, error=None, version="1.0"):
    return {
        "task": "dqn-cartpole",
        "library": library,
        "seed": seed,
        "version": version,
        "error": error,
        "steps_to_threshold": steps,
        "wall_to_threshold": wall,
        "cpu_to_threshold": None if wall is None else wall * 2,
        "final_return": final,
    }


def test_median_range_counts_unsolved_as_never():
    assert tts.median_range([3.0, 1.0, 2.0]) == "2 (1 to 3)"
    assert tts.median_range([1000, None, 3000], 0) == "3,000 (1,000 to -)"
    assert tts.median_range([1.25, None, None], 1) == "- (1.2 to -)"
    assert tts.median_range([None, None]) == "-"
    assert tts.median_range([]) == "-"


def test_table_rows_medians_and_a_dash_for_a_library_that_did_not_run():
    records = [
        _record("machin-loop", 0, 2000, 10.0),
        _record("machin-loop", 1, 4000, 30.0, final=480.0),
        _record("machin-loop", 2, None, None, final=200.0),
        _record("sb3", 0, None, None, error="timeout after 5 s", final=None, version=None),
    ]
    text = tts.table(records, ["machin-loop", "sb3", "tianshou"], ["dqn-cartpole"])
    lines = text.splitlines()
    assert lines[0].startswith("| task | library | solved | wall s to threshold |")
    assert lines[2] == (
        "| dqn-cartpole | machin-loop 1.0 | 2/3 | 30.0 (10.0 to -) | 4,000 (2,000 to -) | "
        "60 (20 to -) | 450.0 | 3 |  |"
    )
    assert lines[3] == "| dqn-cartpole | sb3  | 0/1 | - | - | - | - | 0 | timeout after 5 s |"
    assert lines[4] == (
        "| dqn-cartpole | tianshou | - | - | - | - | - | - | "
        "runner not written yet (issue #47, first part) |"
    )


def test_table_names_the_reason_given_for_a_missing_peer():
    text = tts.table([], ["torchrl"], ["sac-pendulum"], reasons={"torchrl": "no wheel for torch"})
    assert (
        text.splitlines()[2]
        == "| sac-pendulum | torchrl | - | - | - | - | - | - | no wheel for torch |"
    )


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "runs.jsonl"
    first, second = _record("machin-fast", 0, 1000, 1.5), _record("machin-fast", 1, None, None)
    tts.write_jsonl(path, [first])
    tts.write_jsonl(path, [second])  # appends
    assert tts.read_jsonl(path) == [first, second]
    assert len(path.read_text().splitlines()) == 2


def test_evaluation_due_and_stop_at_threshold():
    evaluation = tts.Evaluation("CartPole-v1", 0, 1, every=100, threshold=475.0, budget=1000)
    assert [evaluation.due(s) for s in (50, 100, 150, 250, 256, 999, 1000)] == [
        False, True, False, True, False, True, True,
    ]  # fmt: skip
    assert evaluation.record(100, 10.0) is False
    assert evaluation.reached_at is None
    assert evaluation.record(200, 475.0) is True
    assert evaluation.reached_at["steps"] == 200
    evaluation.record(300, 500.0)
    summary = evaluation.summary()
    assert summary["steps_to_threshold"] == 200
    assert summary["eval_steps"] == [100, 200, 300]
    assert summary["final_return"] == 500.0
    assert summary["wall_to_threshold"] <= summary["wall_seconds"]
    budget = tts.Evaluation("CartPole-v1", 0, 1, every=100, threshold=475.0, budget=1000)
    assert budget.record(1000, 3.0) is True  # the budget stops a run too
    assert budget.summary()["steps_to_threshold"] is None


def test_evaluation_plays_greedy_episodes_from_the_fixed_seeds():
    evaluation = tts.Evaluation("CartPole-v1", 7, 2, every=10, threshold=1e9, budget=100)
    evaluation.evaluate(10, lambda obs: 0)
    expected = []
    for j in range(2):
        env = gym.make("CartPole-v1")
        env.reset(seed=7 + 10**6 + j)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(0)
            total, done = total + reward, terminated or truncated
        expected.append(total)
    assert evaluation.returns == [sum(expected) / 2]


def test_run_one_rejects_unknown_names():
    with pytest.raises(ValueError, match="task_name must be one of .* got 'nope'"):
        tts.run_one("nope", "machin-loop", 0)
    with pytest.raises(ValueError, match="library must be one of .* got 'rllib'"):
        tts.run_one("dqn-cartpole", "rllib", 0)
    with pytest.raises(NotImplementedError, match="library 'torchrl': runner not written"):
        tts.run_one("dqn-cartpole", "torchrl", 0, budget=10)


def test_machin_loop_stops_at_the_first_evaluation_reaching_the_threshold(monkeypatch):
    task = dataclasses.replace(
        tts.TASKS["td3-pendulum"], threshold=-1e9, budget=600, eval_every=200
    )
    monkeypatch.setitem(tts.TASKS, "td3-pendulum", task)
    record = tts.run_one("td3-pendulum", "machin-loop", 0, eval_episodes=1)
    assert record["steps_to_threshold"] == 200
    assert record["steps_taken"] == 200
    assert record["eval_steps"] == [200]
    assert record["error"] is None and record["library"] == "machin-loop"


def test_machin_loop_ppo_on_a_tiny_budget():
    record = tts.run_one("ppo-cartpole", "machin-loop", 0, eval_episodes=1, budget=256)
    assert record["eval_steps"] == [256]  # one rollout of 8 x 32 steps, one update, one evaluation
    assert record["steps_to_threshold"] is None
    assert 8 <= record["final_return"] < 475


def test_machin_fast_ppo_on_a_tiny_budget_without_compile():
    record = tts.run_one(
        "ppo-cartpole", "machin-fast", 0, eval_episodes=1, budget=256, compile=False
    )
    assert record["compile"] is False
    assert record["eval_steps"] == [256]
    assert record["steps_to_threshold"] is None
    assert 8 <= record["final_return"] < 475


def test_a_run_past_its_timeout_is_a_failed_record(tmp_path):
    spec = {"task": "dqn-cartpole", "library": "machin-loop", "seed": 3}
    record = tts.run_subprocess(spec, core=None, timeout=0.01, cache=tmp_path)
    assert record["error"] == "timeout after 0 s"
    assert record["seed"] == 3 and record["steps_to_threshold"] is None


def test_peer_python_falls_back_to_this_one_without_an_install(tmp_path):
    assert tts.peer_python("machin-fast", tmp_path) == sys.executable
    assert tts.peer_python("sb3", tmp_path) == sys.executable
    (tmp_path / "sb3" / "bin").mkdir(parents=True)
    (tmp_path / "sb3" / "bin" / "python").write_text("")
    assert tts.peer_python("sb3", tmp_path) == str(tmp_path / "sb3" / "bin" / "python")


def test_run_all_keeps_the_order_and_gives_each_running_job_a_core_of_its_own(
    monkeypatch, tmp_path
):
    calls = []

    def fake(spec, core, timeout, cache):
        calls.append(core)
        return {"seed": spec["seed"], "core": core}

    monkeypatch.setattr(tts, "run_subprocess", fake)
    specs = [{"seed": s} for s in range(5)]
    seen = []
    results = tts.run_all(specs, 1, 10.0, tmp_path, seen.append)
    assert [r["seed"] for r in results] == [0, 1, 2, 3, 4]
    assert len(seen) == 5
    assert set(calls) == {min(os.sched_getaffinity(0))}  # one job: always the first core


def test_jobs_beyond_the_cores_are_refused(capsys):
    with pytest.raises(SystemExit):
        tts.main(["--jobs", "0"])
    assert "--jobs must be between 1 and the" in capsys.readouterr().err


def test_python_m_benchmarks_skips_it_unless_named(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["benchmarks"])
    assert tts.main() is None
    assert tts.SKIP_MESSAGE in capsys.readouterr().out
