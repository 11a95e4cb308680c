"""Servers built on RPC groups: a versioned key-value server and parameter servers."""

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
]
