"""The machinery of benchmarks/time_to_solve.py on tiny budgets: machin's runners, CleanRL's
adapters (torch and gymnasium only), Tianshou's and TorchRL's settings; Tianshou's and TorchRL's
runners where they are installed here or as peers (``--install``)."""

import dataclasses
import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

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


def test_table_rows_medians_and_a_dash_for_a_library_that_did_not_run(monkeypatch):
    monkeypatch.setitem(tts.CANNOT_RUN, "torchrl", "no wheel for this torch")
    records = [
        _record("machin-loop", 0, 2000, 10.0),
        _record("machin-loop", 1, 4000, 30.0, final=480.0),
        _record("machin-loop", 2, None, None, final=200.0),
        _record("sb3", 0, None, None, error="timeout after 5 s", final=None, version=None),
    ]
    text = tts.table(records, ["machin-loop", "sb3", "torchrl"], ["dqn-cartpole"])
    lines = text.splitlines()
    assert lines[0].startswith("| task | library | solved | wall s to threshold |")
    assert lines[2] == (
        "| dqn-cartpole | machin-loop 1.0 | 2/3 | 30.0 (10.0 to -) | 4,000 (2,000 to -) | "
        "60 (20 to -) | 450.0 | 3 |  |"
    )
    assert lines[3] == "| dqn-cartpole | sb3  | 0/1 | - | - | - | - | 0 | timeout after 5 s |"
    assert lines[4] == (
        "| dqn-cartpole | torchrl | - | - | - | - | - | - | cannot run here (note below) |"
    )
    assert lines[5:] == ["", "- torchrl did not run: no wheel for this torch"]


def test_table_notes_what_torchrl_leaves_out_without_its_compiled_extension():
    text = tts.table(
        [_record("torchrl", 0, 3000, 20.0, version="0.14.1")], ["torchrl"], ["dqn-cartpole"]
    )
    lines = text.splitlines()
    assert lines[2].startswith("| dqn-cartpole | torchrl 0.14.1 | 1/1 | 20.0 (20.0 to 20.0) |")
    assert lines[3] == ""
    assert lines[4] == f"- torchrl: {tts.NOTES['torchrl']}"
    assert "torch 2.13.0" in lines[4] and "prioritized replay" in lines[4]
    assert "torchrl" not in tts.CANNOT_RUN
    assert [tts.missing_reason("torchrl", a) for a in ("dqn", "ppo", "sac", "td3")] == [None] * 4


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


def test_run_one_rejects_unknown_names(monkeypatch):
    with pytest.raises(ValueError, match="task_name must be one of .* got 'nope'"):
        tts.run_one("nope", "machin-loop", 0)
    with pytest.raises(ValueError, match="library must be one of .* got 'rllib'"):
        tts.run_one("dqn-cartpole", "rllib", 0)
    monkeypatch.setitem(tts.CANNOT_RUN, "sb3", "SB3 has no wheel here")
    with pytest.raises(NotImplementedError, match="library 'sb3': SB3 has no wheel here"):
        tts.run_one("dqn-cartpole", "sb3", 0, budget=10)


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


# -- a library lacking an algorithm ------------------------------------------------------------
def test_a_library_lacking_an_algorithm_gets_a_dash_and_no_run(monkeypatch):
    from benchmarks import time_to_solve_tianshou as tianshou

    runners = {k: v for k, v in tianshou.RUNNERS.items() if k != ("tianshou", "sac")}
    monkeypatch.setattr(tianshou, "RUNNERS", runners)
    assert tts.missing_reason("tianshou", "sac") == "no SAC in tianshou"
    assert tts.missing_reason("tianshou", "td3") is None
    row = tts.table([], ["tianshou"], ["sac-pendulum"]).splitlines()[2]
    assert row == "| sac-pendulum | tianshou | - | - | - | - | - | - | no SAC in tianshou |"
    with pytest.raises(NotImplementedError, match="library 'tianshou': no SAC in tianshou"):
        tts.run_one("sac-pendulum", "tianshou", 0, budget=10)


def test_main_starts_no_run_for_a_library_that_cannot_run(monkeypatch, capsys):
    monkeypatch.setitem(tts.CANNOT_RUN, "torchrl", "TorchRL has no wheel here")
    started = []
    monkeypatch.setattr(tts, "run_all", lambda specs, *a, **k: started.extend(specs) or [])
    tts.main(["--tasks", "dqn-cartpole", "--libraries", "torchrl", "cleanrl", "--seeds", "2"])
    assert [(s["library"], s["seed"]) for s in started] == [("cleanrl", 0), ("cleanrl", 1)]
    out = capsys.readouterr().out
    assert "| dqn-cartpole | torchrl | - |" in out and "- torchrl did not run: TorchRL" in out


# -- Tianshou: the settings it is given (plain Python, no Tianshou needed) ---------------------------
def test_tianshou_settings_follow_sb3s_semantics():
    from benchmarks import time_to_solve_tianshou as tianshou

    dqn = tts.TASKS["dqn-cartpole"]
    assert tianshou.prefill_steps(dqn) == 1024  # learning_starts 1000 up to whole chunks of 256
    assert tianshou.target_period(dqn.settings) == 128  # one copy before each burst of 128
    assert tianshou.target_period(dict(dqn.settings, target_update_interval=600)) == 3 * 128
    assert tianshou.epsilon(dqn.settings, 0, 50_000) == 1.0
    assert tianshou.epsilon(dqn.settings, 4000, 50_000) == pytest.approx(1 - 0.96 * 0.5)
    assert tianshou.epsilon(dqn.settings, 9000, 50_000) == 0.04
    assert tianshou.update_calls(dqn) == 192 * 128  # (50,000 - 1,024) / 256 chunks, rounded up
    assert tianshou.update_calls(tts.TASKS["ppo-cartpole"]) == 391  # 100,000 / 256 rollouts
    td3 = dataclasses.replace(tts.TASKS["td3-pendulum"], budget=300)
    assert tianshou.prefill_steps(td3) == 300  # never more than the budget
    assert tianshou.update_calls(td3) == 1


def _tianshou():
    """Tianshou, imported; these tests are skipped only where it is not installed."""
    return pytest.importorskip(
        "tianshou",
        reason="Tianshou is not installed in this environment (a peer, outside the project): "
        "run these tests with ~/.cache/machin-bench/tianshou/bin/python -m pytest "
        "(python -m benchmarks.time_to_solve --install --libraries tianshou makes it)",
    )


def test_tianshou_runs_sac_through_its_trainer_on_a_tiny_budget():
    _tianshou()
    record = tts.run_one("sac-pendulum", "tianshou", 0, eval_episodes=1, budget=150)
    assert record["error"] is None
    assert record["version"].startswith("2.")
    assert record["eval_steps"] == [150]  # 100 random steps, then 50 steps of 1 update each
    assert record["steps_taken"] == 150
    assert -2000 < record["final_return"] < 0


def test_tianshou_ppo_evaluates_from_the_trainers_hook_and_after_the_last_rollout():
    _tianshou()
    record = tts.run_one("ppo-cartpole", "tianshou", 1, eval_episodes=1, budget=2048)
    assert record["eval_steps"] == [1024, 2048]  # the rollout that crossed 1,000; the last one
    assert record["steps_to_threshold"] is None
    assert 8 <= record["final_return"] < 475


def test_tianshou_stops_its_trainer_at_the_threshold(monkeypatch):
    _tianshou()
    task = dataclasses.replace(tts.TASKS["ppo-cartpole"], threshold=-1.0)
    monkeypatch.setitem(tts.TASKS, "ppo-cartpole", task)
    record = tts.run_one("ppo-cartpole", "tianshou", 1, eval_episodes=1, budget=4096)
    assert record["steps_to_threshold"] == 1024  # the first evaluation; no rollout after it
    assert record["eval_steps"] == [1024] and record["steps_taken"] == 1024


def test_tianshou_dqn_fills_its_buffer_at_random_then_trains_in_bursts():
    _tianshou()
    record = tts.run_one("dqn-cartpole", "tianshou", 0, eval_episodes=1, budget=1280)
    assert record["eval_steps"] == [1000, 1280]  # in the random steps; after one burst
    assert 8 <= record["final_return"] < 475


# -- TorchRL: the settings it is given (plain Python, no TorchRL needed) ----------------------------
def test_torchrl_settings_follow_sb3s_semantics():
    from benchmarks import time_to_solve_torchrl as torchrl

    assert torchrl.action_scale(gym.spaces.Box(-2.0, 2.0, (1,))) == 2.0  # Pendulum
    assert torchrl.action_scale(gym.spaces.Box(-1.0, 1.0, (2,))) == 1.0  # LunarLanderContinuous
    uneven = gym.spaces.Box(np.float32([-1, -2]), np.float32([1, 2]))
    with pytest.raises(ValueError, match="space must have one width in every dimension, got Box"):
        torchrl.action_scale(uneven)
    lunar = tts.TASKS["sac-lunarlandercont"]
    assert torchrl.lr_at(lunar, 0) == 7.3e-4
    assert torchrl.lr_at(lunar, 250_000) == pytest.approx(3.65e-4)
    assert torchrl.lr_at(lunar, 600_000) == 0.0  # never below zero past the budget
    assert torchrl.lr_at(tts.TASKS["sac-pendulum"], 10_000) == 1e-3  # a constant rate
    assert torchrl.train_start(tts.TASKS["dqn-cartpole"]) == 1024  # whole batches of 256
    assert torchrl.train_start(tts.TASKS["sac-pendulum"]) == 100
    assert torchrl.train_start(dataclasses.replace(tts.TASKS["td3-pendulum"], budget=300)) == 300


def test_install_pins_torchrl_and_tensordict_with_the_projects_torch(monkeypatch, tmp_path):
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        said = "Successfully installed torchrl\n"
        return tts.subprocess.CompletedProcess(command, 0, said, "WARNING: index ignored\n")

    monkeypatch.setattr(tts.subprocess, "run", fake_run)
    assert tts.install_peer("torchrl", tmp_path) == "Successfully installed torchrl"
    assert commands[0][-2:] == ["torchrl==0.14.1", "tensordict==0.14.3"]
    assert commands[0][commands[0].index("--python") + 1] == str(tmp_path / "torchrl/bin/python")
    pinned = (tmp_path / "torchrl" / "constraints.txt").read_text()
    assert pinned == f"torch=={torch.__version__.split('+')[0]}\n"


def _torchrl():
    """TorchRL, imported; these tests are skipped only where it is not installed."""
    return pytest.importorskip(
        "torchrl",
        reason="TorchRL is not installed in this environment (a peer, outside the project): "
        "run these tests with ~/.cache/machin-bench/torchrl/bin/python -m pytest "
        "(python -m benchmarks.time_to_solve --install --libraries torchrl makes it)",
    )


def _small(monkeypatch, task_name, **changes):
    """Replace ``task_name``'s settings by cheaper ones for a test."""
    task = tts.TASKS[task_name]
    settings = dict(task.settings, **changes)
    monkeypatch.setitem(tts.TASKS, task_name, dataclasses.replace(task, settings=settings))


def test_torchrl_dqn_plays_random_batches_then_trains_in_bursts(monkeypatch):
    _torchrl()
    _small(monkeypatch, "dqn-cartpole", **_SMALL)
    record = tts.run_one("dqn-cartpole", "torchrl", 0, eval_episodes=1, budget=1280)
    assert record["error"] is None and record["version"] == "0.14.1"
    assert record["eval_steps"] == [1024, 1280]  # in the random batches; after one burst
    assert 8 <= record["final_return"] < 475


def test_torchrl_ppo_evaluates_after_the_rollout_that_crosses_a_point():
    _torchrl()
    record = tts.run_one("ppo-cartpole", "torchrl", 1, eval_episodes=1, budget=2048)
    assert record["eval_steps"] == [1024, 2048]  # rollouts of 8 x 32 steps
    assert record["steps_to_threshold"] is None and record["steps_taken"] == 2048
    assert 8 <= record["final_return"] < 475


def test_torchrl_stops_at_the_first_evaluation_reaching_the_threshold(monkeypatch):
    _torchrl()
    task = dataclasses.replace(tts.TASKS["ppo-cartpole"], threshold=-1.0)
    monkeypatch.setitem(tts.TASKS, "ppo-cartpole", task)
    record = tts.run_one("ppo-cartpole", "torchrl", 1, eval_episodes=1, budget=4096)
    assert record["steps_to_threshold"] == 1024  # the first evaluation; no rollout after it
    assert record["eval_steps"] == [1024] and record["steps_taken"] == 1024


@pytest.mark.parametrize("task_name", ["sac-pendulum", "td3-pendulum"])
def test_torchrl_sac_and_td3_run_on_a_tiny_budget(monkeypatch, task_name):
    _torchrl()
    _small(monkeypatch, task_name, learning_starts=100, **_SMALL)
    record = tts.run_one(task_name, "torchrl", 0, eval_episodes=1, budget=300)
    assert record["eval_steps"] == [300] and record["steps_taken"] == 300
    assert record["steps_to_threshold"] is None
    assert -2000 < record["final_return"] < -200  # actions inside the bounds, not solved


def test_torchrl_td3_noise_is_sb3s_in_the_environments_units():
    _torchrl()
    from benchmarks import time_to_solve_torchrl as torchrl

    task = tts.TASKS["td3-pendulum"]
    env = torchrl._env(task, 0)
    agent = torchrl._TD3(task, env.action_spec_unbatched)
    assert agent.loss.policy_noise == pytest.approx(0.4)  # 0.2 x half of Pendulum's [-2, 2]
    assert agent.loss.noise_clip == pytest.approx(1.0)
    assert float(agent.explore[1].std) == pytest.approx(0.2)  # noise_std 0.1 x 2
    env.close()


_SMALL = dict(net_arch=(32, 32), batch_size=32)


# -- CleanRL's adapters (torch and gymnasium only) ---------------------------------------------------
def test_cleanrl_replay_buffer_wraps_and_samples_only_what_it_holds():
    from benchmarks.time_to_solve_cleanrl import ReplayBuffer

    buffer = ReplayBuffer(3, (2,), (), np.int64)
    for i in range(2):
        buffer.add([i, i], [i + 1, i + 1], i, float(i), i == 1)
    assert len(buffer) == 2
    obs, actions, next_obs, rewards, dones = buffer.sample(50)
    assert set(actions.tolist()) == {0, 1}
    assert torch.equal(next_obs[:, 0], obs[:, 0] + 1) and torch.equal(dones, rewards)
    for i in range(2, 5):
        buffer.add([i, i], [i, i], i, 0.0, False)
    assert len(buffer) == 3 and sorted(buffer.actions.tolist()) == [2, 3, 4]


def test_cleanrl_linear_schedule_is_the_scripts():
    from benchmarks.time_to_solve_cleanrl import linear_schedule

    assert linear_schedule(1.0, 0.05, 100, 0) == 1.0
    assert linear_schedule(1.0, 0.05, 100, 50) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 100, 500) == 0.05


def test_cleanrl_dqn_update_fits_its_target_and_leaves_the_target_network():
    from benchmarks import time_to_solve_cleanrl as cleanrl

    torch.manual_seed(0)
    q = cleanrl._mlp([4, 16, 2])
    target = cleanrl.copy.deepcopy(q)
    before = [p.clone() for p in target.parameters()]
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-2)
    batch = (
        torch.randn(32, 4),
        torch.randint(2, (32,)),
        torch.randn(32, 4),
        torch.ones(32),
        torch.ones(32),
    )
    losses = [float(cleanrl.dqn_update(q, target, optimizer, batch, 0.99)) for _ in range(50)]
    assert losses[-1] < 0.05 * losses[0]  # every transition ends: the target is the reward, 1
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters()))


def test_cleanrl_td3_updates_the_actor_every_second_update_and_sac_tunes_alpha():
    from benchmarks import time_to_solve_cleanrl as cleanrl

    torch.manual_seed(0)
    space = gym.spaces.Box(-2.0, 2.0, (1,))
    batch = (
        torch.randn(16, 3),
        torch.rand(16, 1) * 4 - 2,
        torch.randn(16, 3),
        torch.randn(16),
        torch.zeros(16),
    )
    td3 = cleanrl.td3_parts(3, space, (16, 16), 1e-3)
    actor = [p.clone() for p in td3.actor.parameters()]
    cleanrl.td3_update(td3, batch, 0.99, 0.005)
    assert all(torch.equal(a, b) for a, b in zip(actor, td3.actor.parameters()))
    cleanrl.td3_update(td3, batch, 0.99, 0.005)
    assert not all(torch.equal(a, b) for a, b in zip(actor, td3.actor.parameters()))
    assert float(td3.actor(torch.randn(64, 3)).detach().abs().max()) <= 2.0  # scaled to the bounds
    sac = cleanrl.sac_parts(3, space, (16, 16), 1e-3)
    cleanrl.sac_update(sac, batch, 0.99, 0.005)
    assert sac.alpha != 1.0 and sac.alpha == pytest.approx(float(sac.log_alpha.detach().exp()))


@pytest.mark.parametrize(
    "task_name, changes, budget, every, eval_steps",
    [
        (
            "dqn-cartpole",
            dict(_SMALL, learning_starts=100, train_freq=50, gradient_steps=4),
            300,
            100,
            [100, 200, 300],
        ),
        ("ppo-cartpole", {}, 512, 256, [256, 512]),
        ("sac-pendulum", _SMALL, 300, 300, [300]),
        ("td3-pendulum", dict(_SMALL, learning_starts=100), 300, 300, [300]),
    ],
)
def test_cleanrl_adapters_run_on_a_tiny_budget(
    monkeypatch, task_name, changes, budget, every, eval_steps
):
    task = tts.TASKS[task_name]
    settings = dict(task.settings, **changes)
    monkeypatch.setitem(
        tts.TASKS, task_name, dataclasses.replace(task, settings=settings, eval_every=every)
    )
    record = tts.run_one(task_name, "cleanrl", 0, eval_episodes=1, budget=budget)
    assert record["version"] == "1.2.0 (scripts adapted)"
    assert record["eval_steps"] == eval_steps and record["steps_taken"] == budget
    assert record["steps_to_threshold"] is None
    assert (
        task.threshold > record["final_return"] > (8 if task.algorithm in ("dqn", "ppo") else -2000)
    )


def test_cleanrl_stops_at_the_first_evaluation_reaching_the_threshold(monkeypatch):
    settings = dict(tts.TASKS["sac-pendulum"].settings, **_SMALL)
    task = dataclasses.replace(
        tts.TASKS["sac-pendulum"], threshold=-1e9, eval_every=150, settings=settings
    )
    monkeypatch.setitem(tts.TASKS, "sac-pendulum", task)
    record = tts.run_one("sac-pendulum", "cleanrl", 0, eval_episodes=1, budget=600)
    assert record["steps_to_threshold"] == 150 and record["eval_steps"] == [150]
