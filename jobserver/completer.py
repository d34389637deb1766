"""Group commit of step and job completions.

Every execution thread hands its final write (the last step's outcome fused with the
job's final state) to one writer thread, which commits whatever has queued up in one
transaction. Under load many jobs share a commit; when idle a completion is written
at once. The caller waits for its own result, so "done" still means "committed".

A store outage does not strand jobs: a batch that fails because the store is
unavailable is retried with backoff for up to ``RETRY_FOR`` seconds before its callers
see the error. Any other failure is a bug: its callers see it at once, and it ends
the writer loop, which takes the node down (see :mod:`jobserver.loops`).
"""

from __future__ import annotations

import queue
from concurrent.futures import Future

from jobserver.exceptions import FencedOff, StoreUnavailable
from jobserver.loops import Loop
from jobserver.retrying import retry
from jobserver.store import Store
from jobserver.store.records import Completion


MAX_BATCH = 256
RETRY_FOR = 30.0

_Item = tuple[Completion, Future[bool]]


class Completer(Loop):
    """The writer loop; :meth:`submit` from any thread. ``stop()`` lets it write
    what is queued already, then end; joining may take up to ``RETRY_FOR``."""

    def __init__(self, store: Store) -> None:
        super().__init__("completer")
        self._store = store
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()

    def submit(self, completion: Completion) -> Future[bool]:
        """Queue ``completion``. Its future resolves, once the batch holding it is
        committed, to True if written, False if an operator got there first; it
        raises :class:`FencedOff` when another node owns the job now. Done-callbacks
        run in the writer thread."""
        future: Future[bool] = Future()
        self._queue.put((completion, future))
        return future

    def stop(self) -> None:
        super().stop()
        self._queue.put(None)

    def run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                self._write(batch)
        except BaseException as exc:
            self._fail_queued(exc)
            raise

    def _next_batch(self) -> list[_Item] | None:
        item = self._queue.get()
        if item is None:
            return None
        batch = [item]
        while len(batch) < MAX_BATCH:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._queue.put(None)  # stop after this batch
                break
            batch.append(more)
        return batch

    def _write(self, batch: list[_Item]) -> None:
        completions = [completion for completion, _ in batch]
        try:
            results = retry(lambda: self._store.runs.complete(completions),
                            on=StoreUnavailable, for_seconds=RETRY_FOR,
                            what=f"writing {len(batch)} completion(s)")
        except BaseException as exc:
            for _, future in batch:
                future.set_exception(exc)
            if isinstance(exc, StoreUnavailable):
                return  # the outage outlasted the window; the next batch tries again
            raise
        for (_, future), result in zip(batch, results):
            if isinstance(result, FencedOff):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _fail_queued(self, error: BaseException) -> None:
        """The loop is dying: nobody will write what is queued; tell its callers."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[1].set_exception(error)
