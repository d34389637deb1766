"""Holds one lock in a separate process until killed: ``python -m tests.lock_holder KEY``.

The backend comes from the same config a node reads (``JOBSERVER_*`` variables).
"""

from __future__ import annotations

import sys
import time

from jobserver.config import load_config
from jobserver.node import make_lock_backend
from jobserver.store import Store


def main() -> None:
    config = load_config()
    store = Store(config.database_url)
    backend = make_lock_backend(config, store)
    lease = backend.acquire(sys.argv[1])
    print(f"held {lease.fence}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
