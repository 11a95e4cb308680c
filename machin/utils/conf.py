"""Configuration objects, read from the command line or from JSON files.

A :class:`Config` is an :class:`~machin.utils.helper_classes.Object`: its
entries are read and written as attributes (``conf.batch_size``). Values can be
loaded from ``--conf key=value`` command-line options, from a JSON file, or
merged from another configuration, and saved back to JSON.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .helper_classes import Object

__all__ = ["Config", "load_config_cmd", "load_config_file", "merge_config", "save_config"]


class Config(Object):
    """An attribute-style configuration: ``Config(a=1).a == 1``, ``Config(a=1)["a"] == 1``.

    Options that were never set read as ``None``.

    Args:
        **configs: Initial entries.
    """

    def __init__(self, **configs: Any):
        super().__init__(data=configs)


def _parse_value(text: str) -> Any:
    """A Python literal when ``text`` is one, otherwise ``text`` itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def load_config_cmd(
    merge_conf: Optional[Config] = None, args: Optional[Sequence[str]] = None
) -> Config:
    """Read ``--conf key=value`` options from the command line.

    ``--conf a=b`` sets ``a`` to ``b``. Each value is read as a Python literal
    (``--conf lr=1e-3``, ``--conf device='"cuda:1"'``,
    ``--conf 'some_dict={"some_key": 1}'``); a value that is not a valid literal
    is kept as the plain string (``--conf device=cuda:1`` gives ``"cuda:1"``).
    Note that the shell removes unescaped quotes before Python sees them. The
    option may be repeated and may carry several pairs (``--conf a=1 b=2``). Other
    command-line arguments are left to the script, except misspellings of
    ``--conf`` such as ``--conf1=2``, which raise (Machin 0.3.4 stopped at any
    unknown argument).

    Args:
        merge_conf: Configuration to merge the parsed values into (it is modified
            and returned). A new :class:`Config` when ``None``.
        args: Arguments to parse instead of ``sys.argv[1:]``.

    Returns:
        The configuration holding the parsed values.

    Raises:
        ValueError: When a ``--conf`` item is not of the form ``key=value`` with a
            non-empty key, or an argument starts with ``--conf`` but is not ``--conf``.
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--conf", action="append", nargs="+", default=[])
    known, unknown = parser.parse_known_args(sys.argv[1:] if args is None else list(args))
    _refuse_misspelled_conf(unknown)
    parsed: Dict[str, Any] = {}
    for group in known.conf:
        for item in group:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(f"--conf expects items of the form key=value, got {item!r}")
            parsed[key] = _parse_value(value)
    return merge_config(Config() if merge_conf is None else merge_conf, parsed)


def _refuse_misspelled_conf(unknown: Sequence[str]) -> None:
    """Raise for an argument that looks like ``--conf`` but is not (``--conf1=2``, ``--confs``).

    Machin 0.3.4 stopped at any unknown argument; machin leaves the others to the
    script, but a misspelt ``--conf`` would otherwise be dropped without a word.
    """
    for arg in unknown:
        if arg.startswith("--conf"):
            raise ValueError(
                f"unrecognized argument {arg!r}: write configuration overrides as "
                f"--conf key=value (or --conf=key=value)"
            )


def load_config_file(
    json_file: Union[str, os.PathLike], merge_conf: Optional[Config] = None
) -> Config:
    """Read a configuration from a JSON file holding one object.

    Args:
        json_file: Path of the JSON file.
        merge_conf: Configuration to merge the file's values into (it is modified and
            returned). A new :class:`Config` when ``None``.

    Returns:
        The configuration holding the file's values.

    Raises:
        ValueError: When the file does not hold a JSON object.
    """
    with open(json_file, encoding="utf-8") as file:
        data = json.load(file)
    if not isinstance(data, dict):
        raise ValueError(
            f"json_file {os.fspath(json_file)!r} must hold a JSON object, got a {type(data).__name__}"
        )
    return merge_config(Config() if merge_conf is None else merge_conf, data)


def merge_config(conf: Object, merge: Union[Mapping[str, Any], Object]) -> Object:
    """Copy the entries of ``merge`` into ``conf``, overwriting entries with the same key.

    Entries are written as with ``conf[key] = value``. When ``merge`` is a
    dictionary, a key that is read-only in ``conf`` (see ``const_attrs``) raises;
    when ``merge`` is a Config/Object, such keys are skipped and keep their value.

    Args:
        conf: Configuration to update (modified in place).
        merge: A dictionary or a configuration whose entries are copied.

    Returns:
        ``conf``.

    Raises:
        TypeError: When ``conf`` is not a Config/Object or ``merge`` is neither a
            mapping nor a Config/Object.
        ~machin.utils.helper_classes.ObjectAttributeError: When a dictionary writes a
            read-only key, or a key that names an attribute of the configuration class.
    """
    if not isinstance(conf, Object):
        raise TypeError(f"conf must be a Config, got {conf!r} of type {type(conf).__name__}")
    skip_const = isinstance(merge, Object)
    if skip_const:
        merge = merge.data
    elif not isinstance(merge, Mapping):
        raise TypeError(
            f"merge must be a dict or a Config, got {merge!r} of type {type(merge).__name__}"
        )
    for key, value in merge.items():
        if skip_const and key in conf.const_attrs:
            continue
        conf[key] = value
    return conf


def save_config(conf: Object, json_file: Union[str, os.PathLike]) -> None:
    """Write the entries of a configuration to a JSON file.

    Args:
        conf: Configuration to save.
        json_file: Path of the file to (over)write.

    Raises:
        TypeError: When ``conf`` is not a Config/Object, or when a value cannot be
            written as JSON (the message names the key).
    """
    if not isinstance(conf, Object):
        raise TypeError(f"conf must be a Config, got {conf!r} of type {type(conf).__name__}")
    bad: List[str] = []
    for key, value in conf.data.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            bad.append(f"{key}={value!r} ({type(value).__name__})")
    if bad:
        raise TypeError(
            f"save_config can only write JSON values; these entries are not: {', '.join(bad)}"
        )
    with open(json_file, "w", encoding="utf-8") as file:
        json.dump(conf.data, file, indent=2, sort_keys=True)
