"""Reading a system's watermark: the newest business date its source has.

``{given: true}`` is the date passed with the run (``--watermark``). The file and SQL
sources are read by :func:`jobserver.batches.watermarks.read_watermark`, which uses the
node's named connections (``connections.<name>.url``) — the same ones as SQL steps.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from jobserver.batches.spec import GivenWatermark, Watermark
from jobserver.exceptions import InvalidRequest


def read_source(source: Watermark, given: date | None, connections: Any) -> date | None:
    """The source's newest business date, or None when it has none (yet)."""
    if isinstance(source, GivenWatermark):
        return given
    try:
        import jobserver.batches.watermarks as module
    except ImportError:
        raise InvalidRequest("watermark: this server reads only watermarks given with the "
                             "run", [{"field": "watermark",
                                      "message": "file and sql watermarks are not available"}]
                             ) from None
    found: date | None = module.read_watermark(source, connections, given)
    return found
