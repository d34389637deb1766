"""Push wake-ups on PostgreSQL: LISTEN on a dedicated connection.

Submits, resumes and leader assignments send ``NOTIFY jobserver_work`` in their
transaction; this thread turns each notification into a set of the scheduler's wake
event, so an idle scheduler claims at once instead of at its next poll. Polling stays
the fallback (and the only path on SQLite, or with ``scheduler.notify = false`` behind
a transaction-pooling proxy, where LISTEN does not work).
"""

from __future__ import annotations

import logging
import select
import threading

from jobserver.store import WAKE_CHANNEL

log = logging.getLogger(__name__)

RECONNECT_DELAY = 1.0


class Listener:
    def __init__(self, url: str, wake: threading.Event) -> None:
        from locks.postgres import libpq_params

        self._params = libpq_params(url)
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # reconnect; polling covers the gap
                log.warning("LISTEN connection failed (%s); polling until it is back", exc)
                self._wake.set()
                self._stop.wait(RECONNECT_DELAY)

    def _listen(self) -> None:
        import psycopg2

        conn = psycopg2.connect(**self._params, application_name="jobserver-listen",
                                keepalives=1, keepalives_idle=5, keepalives_interval=2,
                                keepalives_count=3)
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"LISTEN {WAKE_CHANNEL}")
            while not self._stop.is_set():
                if select.select([conn], [], [], 1.0)[0]:
                    conn.poll()
                    if conn.notifies:
                        conn.notifies.clear()
                        self._wake.set()
        finally:
            conn.close()
