"""Which finished states retention deletes by default, and which a purge may delete.

Kept outside the store so that ``jobserver purge --help`` can list them without
importing SQLAlchemy; :mod:`jobserver.store.retention` re-exports both and says what
deleting a job involves.
"""

from __future__ import annotations

from jobserver.states import State

#: The states ``retention.finished_jobs`` deletes.
DEFAULT_STATES = (State.SUCCEED, State.DISCARDED)
#: Every state a purge may delete (``jobserver purge --state``); READY, RUNNING and
#: STOPPED jobs are never deleted.
DELETABLE = (State.SUCCEED, State.DISCARDED, State.ERROR)
