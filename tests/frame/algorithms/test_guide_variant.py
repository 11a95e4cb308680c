"""The variant of the "Adding an algorithm" walkthrough passes every contract of the suite."""

import importlib.util
import os

import pytest
import torch
from torch import nn

from .contract import CONTRACTS, ContractCase, applies, broken
from .nets import QNet, transition

_PATH = os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "examples", "extending", "soft_dqn.py"
)
_spec = importlib.util.spec_from_file_location("soft_dqn_example", _PATH)
soft_dqn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soft_dqn)
SoftDQN = soft_dqn.SoftDQN

CASE = ContractCase(
    args=lambda: (QNet(hidden=16), QNet(hidden=16), torch.optim.Adam, nn.MSELoss()),
    options={"batch_size": 8},
    act=lambda agent, state: agent.act_discrete(state, use_target=True),
    explore=lambda agent, state: agent.act_discrete_with_noise(state),
    state=lambda: {"state": torch.randn(6, 4)},
    experience=lambda: [
        transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)
    ],
    trains={"update_value": ["qnet"]},
)


@pytest.mark.parametrize("contract", [c for c in CONTRACTS if applies(c, SoftDQN)])
def test_the_walkthrough_variant_meets_every_contract(contract, tmp_path):
    torch.manual_seed(0)
    failure = broken(contract, SoftDQN, CASE, str(tmp_path))
    assert failure is None, failure


def test_the_soft_maximum_target_and_the_new_option():
    agent = SoftDQN(
        QNet(hidden=16),
        QNet(hidden=16),
        torch.optim.Adam,
        nn.MSELoss(),
        temperature=0.5,
        discount=0.9,
        replay_size=64,
    )
    assert agent.mode == "fixed_target" and agent.driver is not None  # inherited from DQN
    for i in range(16):
        agent.store_transition(transition(torch.randn(4), i % 2, torch.randn(4), 1.0, False))
    batch = agent._sample(True)
    with torch.no_grad():
        q = agent.qnet_target(batch.next_state["state"])
        expected = batch.reward + 0.9 * 0.5 * torch.logsumexp(q / 0.5, dim=1, keepdim=True)
    assert torch.allclose(agent._bellman_target(batch), expected, atol=1e-6)
    with pytest.raises(ValueError, match="temperature must be positive"):
        SoftDQN(QNet(hidden=16), QNet(hidden=16), torch.optim.Adam, nn.MSELoss(), temperature=0)
