"""Push wake-ups: an idle scheduler claims as soon as work may be there.

On PostgreSQL, submits, resumes and leader assignments send ``NOTIFY jobserver_work``
in their transaction; :class:`Listener` LISTENs on a dedicated connection and turns
each notification into a set of the scheduler's wake event. On SQLite there is no
NOTIFY, and every writer shares one file on one host: :class:`CommitWatcher` asks the
database every few milliseconds whether another connection has committed. Polling
stays the fallback (and the only path with ``scheduler.notify = false``, as behind a
transaction-pooling proxy, where LISTEN does not work).
"""

from __future__ import annotations

import logging
import select
import sqlite3
import threading
import time
from typing import Any

from jobserver.loops import Loop
from jobserver.store import LISTEN_WORK
from jobserver.store.engine import sqlite_path

log = logging.getLogger(__name__)

RECONNECT_DELAY = 1.0
#: How often :class:`CommitWatcher` looks for commits by other connections: a job
#: submitted to an idle SQLite node waits 5 ms on average for it, and an idle node
#: spends about 1 % of a core asking.
WATCH_INTERVAL = 0.01


class WakeSource(Loop):
    """A loop that sets the scheduler's wake event when new work may be there.

    When its connection fails (an error of its driver, or of the socket) it wakes the
    scheduler once (polling covers the gap), logs, and tries again after
    ``RECONNECT_DELAY``; ``stop`` ends it within about a second. Any other error
    ends the loop.
    """

    #: The loop's name, and what the warning on a failure calls it.
    thread_name, what = "wake", "wake-up source"
    #: The errors of a lost connection, retried.
    expected: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, wake: threading.Event) -> None:
        super().__init__(self.thread_name)
        self._wake = wake

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._watch()
            except self.expected as exc:
                log.warning("%s failed (%s); polling until it is back", self.what, exc)
                self._wake.set()
                self.stopping.wait(RECONNECT_DELAY)

    def _watch(self) -> None:
        """Set the wake event on each sign of new work until stopped; raise on failure."""
        raise NotImplementedError


class Listener(WakeSource):
    """LISTEN on a dedicated PostgreSQL connection; each notification wakes."""

    thread_name, what = "pg-listen", "LISTEN connection"

    def __init__(self, url: str, wake: threading.Event) -> None:
        from jobserver.store.engine import libpq_params

        super().__init__(wake)
        self._params = libpq_params(url)
        self.expected = (_psycopg2_error(), OSError)

    def _watch(self) -> None:
        import psycopg2

        conn = psycopg2.connect(**self._params, application_name="jobserver-listen",
                                keepalives=1, keepalives_idle=5, keepalives_interval=2,
                                keepalives_count=3)
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(LISTEN_WORK)
            while not self.stopping.is_set():
                if select.select([conn], [], [], 1.0)[0]:
                    conn.poll()
                    if conn.notifies:
                        conn.notifies.clear()
                        self._wake.set()
        finally:
            conn.close()


class CommitWatcher(WakeSource):
    """Wakes the scheduler when another connection commits to the SQLite file.

    ``PRAGMA data_version`` changes whenever a connection other than the asking one has
    committed a change; in WAL mode the question reads shared memory, not the file.
    Any commit wakes: an API worker's submit, another node's heartbeat, this node's own
    group commit. A wake that finds nothing to claim costs one empty claim; a submitted
    job starts within ``WATCH_INTERVAL`` instead of at the next poll.
    """

    thread_name, what = "sqlite-watch", "watching the SQLite file for commits"
    expected = (sqlite3.Error, OSError)

    def __init__(self, path: str, wake: threading.Event,
                 interval: float = WATCH_INTERVAL) -> None:
        super().__init__(wake)
        self._path, self._interval = path, interval

    def _watch(self) -> None:
        connection = sqlite3.connect(self._path, check_same_thread=False)  # reads only
        cursor = connection.cursor()  # one cursor: the question is asked 100 times a second
        try:
            seen = _data_version(cursor)
            while not self.stopping.is_set():
                time.sleep(self._interval)  # cheaper than an Event's timed wait
                version = _data_version(cursor)
                if version != seen:
                    seen = version
                    self._wake.set()
        finally:
            connection.close()


def _psycopg2_error() -> type[BaseException]:
    import psycopg2

    return psycopg2.Error


def _data_version(cursor: sqlite3.Cursor) -> Any:
    return cursor.execute("PRAGMA data_version").fetchone()[0]


def watcher_for(url: str, notify: bool, wake: threading.Event) -> WakeSource | None:
    """The wake-up source for a store ``url``: LISTEN on PostgreSQL, the commit watcher
    on a SQLite file; None with ``notify`` off or for an in-memory database."""
    if not notify:
        return None
    if url.startswith("postgresql"):
        return Listener(url, wake)
    path = sqlite_path(url) if url.startswith("sqlite") else None
    return CommitWatcher(path, wake) if path else None
