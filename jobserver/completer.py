"""Group commit of step and job completions.

Every execution thread hands its final write (the last step's outcome fused with the
job's final state) to one writer thread, which commits whatever has queued up in one
transaction. Under load many jobs share a commit; when idle a completion is written
at once. The caller waits for its own result, so "done" still means "committed".

A store outage does not strand jobs: a failed batch is retried with backoff for up to
``RETRY_FOR`` seconds before its callers see the error.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

from jobserver.exceptions import FencedOff
from jobserver.retrying import retry
from jobserver.store import Store
from jobserver.store.records import Completion


MAX_BATCH = 256
RETRY_FOR = 30.0


class Completer:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._queue: queue.SimpleQueue[tuple[Completion, Future[bool]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="completer", daemon=True)
        self._thread.start()

    def complete(self, completion: Completion) -> bool:
        """Write ``completion``; True if written, False if an operator got there first.

        Raises :class:`FencedOff` when another node owns the job now.
        """
        return self.submit(completion).result()

    def submit(self, completion: Completion) -> Future[bool]:
        """Queue ``completion``; its future resolves as :meth:`complete` returns, once
        the batch holding it is committed. Done-callbacks run in the writer thread."""
        future: Future[bool] = Future()
        self._queue.put((completion, future))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=RETRY_FOR + 5)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
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
            self._write(batch)

    def _write(self, batch: list[tuple[Completion, Future[bool]]]) -> None:
        completions = [completion for completion, _ in batch]
        try:
            results = retry(lambda: self._store.runs.complete(completions), on=Exception,
                            for_seconds=RETRY_FOR, what=f"writing {len(batch)} completion(s)")
        except Exception as exc:
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results):
            if isinstance(result, FencedOff):
                future.set_exception(result)
            else:
                future.set_result(result)
