"""Keeping a distributed learner busy: the next batch in flight, pushes that do not wait.

A learner of Ape-X or IMPALA spends most of an update waiting when it samples, sends
priorities and pushes its network one after the other, each a round trip to another
process. The pieces here let those trips overlap with the learner's own work:

* :class:`Prefetcher` requests the next batch as soon as the current one has arrived, so
  that it travels while the learner computes;
* :class:`BackgroundCall` runs one call at a time in a worker thread (the model push);
* :class:`LearnerPipeline` puts both together for the algorithms: the prefetched batch,
  the push without waiting, and :meth:`~LearnerPipeline.flush`, which the world's
  :meth:`~machin.parallel.distributed.World.stop` also runs.

At most one call of each kind is outstanding, so nothing piles up, and the error of an
outstanding call is raised by the next call of its kind (or by ``flush``).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from functools import partial
from typing import Any, Callable, Deque, Dict, Hashable, Optional, Tuple

from torch import nn

from ...parallel.distributed._context import current_world

__all__ = ["Prefetcher", "BackgroundCall", "LearnerPipeline"]


class Prefetcher:
    """Keeps the next call in flight while the caller works on the result of the last one.

    Args:
        start: Begins a call for the arguments it is given and returns an object whose
            ``wait()`` returns the call's result (or raises its error), e.g. a buffer's
            ``sample_batch_async``.
    """

    def __init__(self, start: Callable[..., Any]):
        self._start = start
        self._pending: Optional[Any] = None
        self._key: Optional[Hashable] = None

    @property
    def in_flight(self) -> bool:
        """Whether a call started by :meth:`take` is outstanding."""
        return self._pending is not None

    def take(self, args: Tuple[Any, ...], prefetch: Callable[[Any], bool] = lambda _: True) -> Any:
        """The result of the call for ``args`` started by the previous ``take``; then start the next.

        When nothing is in flight, or the call in flight was for other arguments (it is
        dropped), the call starts now and this waits for it. The next call for ``args`` is
        started only when ``prefetch(result)`` is true (e.g. not after an empty sample, so
        that a sample taken later sees what was stored meanwhile).

        Args:
            args: The arguments of the call (hashable; compared with those in flight).
            prefetch: Decides from this result whether to start the next call.

        Raises:
            Exception: Whatever the call raised (a prefetched call's error is raised here,
                by the ``take`` that wanted its result).
        """
        pending = self._pending if self._key == args else None
        if pending is None:
            self.cancel()
            pending = self._start(*args)
        self._pending = self._key = None
        result = pending.wait()
        if prefetch(result):
            self._pending, self._key = self._start(*args), args
        return result

    def cancel(self) -> None:
        """Wait for the call in flight, if any, and drop its result.

        Its error is dropped as well: nobody wants that result any more (the usual case
        is a world shutting down, where the call may have failed because a member left).
        """
        pending, self._pending, self._key = self._pending, None, None
        if pending is not None:
            with suppress(Exception):  # a dropped result's error, see above
                pending.wait()


class BackgroundCall:
    """Runs one call at a time in a worker thread, so the caller does not wait for it.

    Args:
        name: Name prefix of the worker thread (shown in debuggers and thread dumps).
    """

    def __init__(self, name: str):
        self._name = name
        self._executor: Optional[ThreadPoolExecutor] = None
        self._future: Optional[Future] = None

    @property
    def in_flight(self) -> bool:
        """Whether a submitted call has not been waited for yet."""
        return self._future is not None

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        """Start ``function(*args)`` in the worker thread and return at once.

        Raises:
            RuntimeError: When a call is still outstanding (call :meth:`wait` first).
        """
        if self._future is not None:
            raise RuntimeError(
                f"{self._name}: a call is still outstanding; wait() for it before submitting another"
            )
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        self._future = self._executor.submit(function, *args)

    def wait(self) -> Any:
        """Wait for the outstanding call and return its result (``None`` when there is none).

        Raises:
            Exception: Whatever the call raised.
        """
        future, self._future = self._future, None
        return None if future is None else future.result()

    def close(self) -> None:
        """Wait for the outstanding call, then end the worker thread (raising the call's error)."""
        try:
            self.wait()
        finally:
            executor, self._executor = self._executor, None
            if executor is not None:
                executor.shutdown(wait=True)


def _replica(network: nn.Module) -> nn.Module:
    """The module inside a (Distributed)DataParallel wrapper, or the network itself."""
    if isinstance(network, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return network.module
    return network


class LearnerPipeline:
    """What a distributed learner overlaps with its updates (mixed into Ape-X and IMPALA).

    The host is a :class:`~machin.frame.algorithms.utils.SharedNetworkSync` whose
    ``replay_buffer`` has ``sample_batch_async`` (and ``sample_batches_async`` when the
    host's ``prefetch_batches`` is above 1). :meth:`_prefetched_sample` hands out a
    batch of the previous request and, when it takes the first batch of a request,
    sends the next one (with ``prefetch_batches`` = 1, an update trains on a batch
    sampled one update earlier); :meth:`_publish_nowait` pushes the shared network from
    a worker thread. The first of them registers :meth:`flush` with the running world,
    whose ``stop`` then waits for what is outstanding.
    """

    _prefetcher: Optional[Prefetcher] = None
    _pusher: Optional[BackgroundCall] = None
    _pushed_version: int = 0
    #: Keyword arguments of every ``sample_batch_async`` call.
    _sample_options: Dict[str, Any] = {}
    #: Batches requested in one round trip (more than 1 needs the buffer's ``sample_batches_async``).
    prefetch_batches: int = 1

    def _pipeline(self) -> Tuple[Prefetcher, BackgroundCall]:
        if self._prefetcher is None:
            if self.prefetch_batches > 1:
                start = partial(
                    self.replay_buffer.sample_batches_async,
                    self.prefetch_batches,
                    **self._sample_options,
                )
            else:
                start = partial(self.replay_buffer.sample_batch_async, **self._sample_options)
            self._prefetcher = Prefetcher(start)
            self._ready: Deque[Any] = deque()  # batches of the last request not trained on yet
            self._ready_for: Optional[Tuple[Any, ...]] = None
            self._pusher = BackgroundCall(f"{type(self).__name__.lower()}_push")
            world = current_world()
            if world is not None:
                world.add_stop_callback(self.flush)
        return self._prefetcher, self._pusher

    def _prefetched_sample(self, *args: Any) -> Any:
        """What ``replay_buffer.sample_batch(*args)`` returned, requested one request earlier.

        With ``prefetch_batches`` = k > 1, one request brings k batches, handed out one
        per call; the next request leaves when the first of them is handed out.
        """
        prefetcher, _ = self._pipeline()
        if self.prefetch_batches == 1:
            return prefetcher.take(args, prefetch=lambda sampled: sampled[0] > 0)
        if not self._ready or self._ready_for != args:
            self._ready.clear()
            self._ready.extend(prefetcher.take(args, prefetch=lambda samples: samples[0][0] > 0))
            self._ready_for = args
        return self._ready.popleft()

    def _publish_nowait(self) -> None:
        """Push a copy of the shared network without waiting, after the previous push ended.

        A push to a model server in this process is a local store: it is done at once. A
        push to another process runs in the worker thread.
        """
        _, pusher = self._pipeline()
        self._settle_push()
        server = self.model_server[0]
        module = _replica(getattr(self, self._shared_network))
        version = getattr(module, "pp_version", 0)
        state = {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
        self._pushed_version = version
        if getattr(server, "serves_here", False):
            self._pushed(server.push_state(state, version))
        else:
            pusher.submit(server.push_state, state, version)

    def _settle_push(self) -> None:
        """Wait for the push in flight, if any, and apply its outcome (raising its error)."""
        if self._pusher is not None and self._pusher.in_flight:
            self._pushed(self._pusher.wait())

    def _pushed(self, accepted: bool) -> None:
        """Apply the outcome of a push, as a waiting push would.

        An accepted push moves the network to the next version. A refused one (another
        learner pushed that version first) loads the newest parameters, as
        :meth:`~machin.parallel.server.PushPullModelServer.push` does; but replicas in
        ``DistributedDataParallel``, which hold equal parameters by construction, only take
        the newest version number, keeping the update they made since.
        """
        network = getattr(self, self._shared_network)
        module = _replica(network)
        if accepted:
            module.pp_version = self._pushed_version + 1
            return
        server = self.model_server[0]
        newest = server.pull_state()
        if newest is None:
            raise RuntimeError(
                f"the push of model {server.model_name!r} was refused, then the pull of its newest version "
                f"found nothing"
            )
        state, module.pp_version = newest
        if not isinstance(network, nn.parallel.DistributedDataParallel):
            module.load_state_dict(state)

    def publish(self) -> bool:
        """Push the shared network to the model server now (waiting for a push in flight first).

        Returns:
            Whether the model server took it (``False``: it held a newer version, which was
            loaded instead).
        """
        self._settle_push()
        return super().publish()

    def flush(self) -> None:
        """Wait for the model push and priority update in flight and drop the prefetched batch.

        Call it when the learner stops updating (the world's ``stop`` calls it too); the
        next update samples afresh.

        Raises:
            Exception: The error of the push or of the priority update in flight.
        """
        if self._prefetcher is not None:
            self._prefetcher.cancel()
            self._ready.clear()
        try:
            self._settle_push()
            if self._pusher is not None:
                self._pusher.close()  # its thread ends; the next push starts another
        finally:
            wait = getattr(self.replay_buffer, "wait_priority_updates", None)
            if wait is not None:
                wait()
