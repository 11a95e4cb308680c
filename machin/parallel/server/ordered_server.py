"""A versioned key-value server reached through an RPC group."""

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Any, Dict, Hashable, Optional, Tuple

from ...utils.compat import ignores_extra_args
from ..distributed.rpc_group import RpcGroup
from ..exception import RuntimeAssertionError, ValueAssertionError

__all__ = ["OrderedServerBase", "OrderedServerSimple", "OrderedServerSimpleImpl"]


class OrderedServerBase(ABC):
    """A key-value store whose values carry versions; pushes must name the version they replace.

    Implementations need not be strongly consistent: a push that was acknowledged
    may still be lost.
    """

    @abstractmethod
    def push(self, key: Hashable, value: Any, version: Hashable, prev_version: Hashable) -> bool:
        """Store ``value`` as ``version`` of ``key``, if ``prev_version`` is the newest version.

        When ``version == prev_version`` the newest value is replaced in place, with no
        ordering guarantee between concurrent pushes (a loophole you may use on purpose).

        Args:
            key: The key.
            value: The new value.
            version: Its version.
            prev_version: The version it follows.

        Returns:
            ``True`` if stored, ``False`` if ``prev_version`` was not the newest version.
        """

    @abstractmethod
    def pull(
        self, key: Hashable, version: Optional[Hashable] = None
    ) -> Optional[Tuple[Any, Hashable]]:
        """Read a version of ``key`` (default: the newest).

        Args:
            key: The key.
            version: The version to read; ``None`` for the newest.

        Returns:
            ``(value, version)``, or ``None`` when the key or the version is unknown
            (or the version was dropped as too old).
        """


class OrderedServerSimple(OrderedServerBase):
    """Accessor of an :class:`OrderedServerSimpleImpl`, usable from any process.

    Get it with ``group.get_paired(server_name).to_here()`` or build it directly.

    Args:
        server_name: Name the server was created with.
        group: The RPC group of the server.
    """

    def __init__(self, server_name: str, group: RpcGroup):
        self.server_name = server_name
        self.group = group

    def push(self, key: Hashable, value: Any, version: Hashable, prev_version: Hashable) -> bool:
        """See :meth:`OrderedServerBase.push`."""
        return self.group.registered_sync(
            self.server_name + "/_push_service", args=(key, value, version, prev_version)
        )

    def pull(
        self, key: Hashable, version: Optional[Hashable] = None
    ) -> Optional[Tuple[Any, Hashable]]:
        """See :meth:`OrderedServerBase.pull`."""
        return self.group.registered_sync(self.server_name + "/_pull_service", args=(key, version))


class OrderedServerSimpleImpl:
    """A key-value server that keeps the newest version of each key and ``version_depth`` older ones.

    Construct it only in the process that serves it, a member of ``group``. It
    registers the push and pull services in ``group`` and pairs an
    :class:`OrderedServerSimple` accessor under ``server_name``.

    The first push of a key always succeeds; later ones succeed only when their
    ``prev_version`` is the newest stored version, so versions form a chain.

    Other arguments are accepted and ignored with a warning, as Machin 0.3.4 did
    (its documentation named a ``server_runner`` argument that it never used).

    Args:
        server_name: Name of the server, unique in the group.
        group: The RPC group it serves.
        version_depth: How many versions older than the newest to keep for each key.
            With the default 1, after versions 1, 2 and 3 of a key, 2 and 3 can be
            pulled. This is what Machin 0.3.4 did (its docstring said that 1 keeps only
            the newest, but its code and tutorials kept one more).

    Raises:
        ValueError: If ``version_depth`` is not a positive int (also an
            ``AssertionError``, which Machin 0.3.4 raised).
        RuntimeError: If the current process is not a member of ``group`` (also an
            ``AssertionError``).
    """

    @ignores_extra_args
    def __init__(self, server_name: str, group: RpcGroup, version_depth: int = 1):
        if (
            isinstance(version_depth, bool)
            or not isinstance(version_depth, int)
            or version_depth < 1
        ):
            raise ValueAssertionError(
                f"version_depth must be a positive int, got {version_depth!r}"
            )
        if not group.is_member():
            raise RuntimeAssertionError(
                f"OrderedServerSimpleImpl {server_name!r} must be created on a member of group "
                f"{group.get_group_members()}: the current process is not a member of the group"
            )
        self.server_name = server_name
        self.group = group
        self.version_depth = version_depth
        self._storage: Dict[Hashable, OrderedDict[Hashable, Any]] = {}
        self._lock = threading.Lock()
        group.register(server_name + "/_push_service", self._push_service)
        group.register(server_name + "/_pull_service", self._pull_service)
        group.pair(server_name, OrderedServerSimple(server_name, group))

    def _push_service(
        self, key: Hashable, value: Any, version: Hashable, prev_version: Hashable
    ) -> bool:
        with self._lock:
            versions = self._storage.get(key)
            if versions is None:
                self._storage[key] = OrderedDict([(version, value)])
                return True
            newest = next(reversed(versions))
            if newest != prev_version:
                return False
            if version != newest:
                versions.pop(version, None)  # a reused old version becomes the newest
            versions[version] = value
            while len(versions) > self.version_depth + 1:
                versions.popitem(last=False)
            return True

    def _pull_service(
        self, key: Hashable, version: Optional[Hashable] = None
    ) -> Optional[Tuple[Any, Hashable]]:
        with self._lock:
            versions = self._storage.get(key)
            if versions is None:
                return None
            if version is None:
                version = next(reversed(versions))
            if version not in versions:
                return None
            return versions[version], version
