"""Configs and a command-line launcher: ``python -m machin.auto generate | train | enjoy | list``.

See :mod:`machin.auto.config` for the config file, :mod:`machin.auto.launcher` for what the
subcommands do and :mod:`machin.auto.networks` for the default networks.
"""
