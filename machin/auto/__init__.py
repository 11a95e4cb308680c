"""Configs and a command-line launcher:
``python -m machin.auto list | generate | train | enjoy | tune | export``.

See :mod:`machin.auto.config` for the config file, :mod:`machin.auto.launcher` for what
``train`` and ``enjoy`` do, :mod:`machin.auto.tune` for the hyperparameter search,
:mod:`machin.auto.export` for the policy export and :mod:`machin.auto.networks` for the
default networks.
"""
