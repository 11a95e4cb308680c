"""Servers built on RPC groups: a versioned key-value server and parameter servers."""

from . import ordered_server, param_server
from .ordered_server import OrderedServerBase, OrderedServerSimple, OrderedServerSimpleImpl
from .param_server import (
    PushPullGradServer,
    PushPullGradServerImpl,
    PushPullModelServer,
    PushPullModelServerImpl,
)

__all__ = [
    "OrderedServerBase",
    "OrderedServerSimple",
    "OrderedServerSimpleImpl",
    "PushPullGradServer",
    "PushPullGradServerImpl",
    "PushPullModelServer",
    "PushPullModelServerImpl",
    "ordered_server",  # the submodules, listed in Machin 0.3.4's __all__
    "param_server",
]
