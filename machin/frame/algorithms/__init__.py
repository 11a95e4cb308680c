"""Every algorithm class, importable from here or from its own module, and ``RunStateError``.

The classes are imported on first access, so ``import machin`` stays cheap and a
module that is broken or absent only fails when its class is asked for.
"""

import importlib

_CLASS_TO_MODULE = {
    "TorchFramework": "base",
    "DQN": "dqn",
    "DQNPer": "dqn_per",
    "RAINBOW": "rainbow",
    "C51": "c51",
    "QRDQN": "qrdqn",
    "IQN": "iqn",
    "R2D1": "r2d1",
    "RecurrentSAC": "recurrent_ac",
    "RecurrentTD3": "recurrent_ac",
    "DDPG": "ddpg",
    "DDPGPer": "ddpg_per",
    "HDDPG": "hddpg",
    "TD3": "td3",
    "TD3BC": "td3_bc",
    "BC": "bc",
    "A2C": "a2c",
    "A3C": "a3c",
    "PPO": "ppo",
    "TRPO": "trpo",
    "SAC": "sac",
    "TQC": "tqc",
    "CrossQ": "crossq",
    "REDQ": "redq",
    "DroQ": "redq",
    "DQNApex": "apex",
    "DDPGApex": "apex",
    "IMPALA": "impala",
    "ARS": "ars",
    "MADDPG": "maddpg",
    "CQLSAC": "cql",
    "DiscreteCQL": "cql",
    "IQL": "iql",
    "GAIL": "gail",
    "RunStateError": "run_state",
}

__all__ = list(_CLASS_TO_MODULE)


def __getattr__(name):
    module = _CLASS_TO_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
