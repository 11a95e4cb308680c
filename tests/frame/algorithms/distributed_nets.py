"""Helpers shared by the tests of the distributed algorithms (A3C, DQNApex, DDPGApex, IMPALA)."""

import time


def pull_until(agent, network, version):
    """Pull the shared network until the learner has made ``version`` updates (one push each).

    Samplers call it before each episode to keep the learner's pace; the test
    harness's hard timeout ends a run whose learner has died.
    """
    agent.manual_sync()
    while getattr(network, "pp_version", 0) < version:
        time.sleep(0.05)  # each poll is an RPC pull: poll gently, the learner needs the CPU
        agent.manual_sync()
