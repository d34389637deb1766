"""Reading a system's watermark: the newest business date its source has.

``{given: true}`` is the date passed with the run (``--watermark``). The file and SQL
sources are read by :func:`jobserver.batches.watermarks.read_watermark` (the SQL steps'
module: the same named connections, ``connections.<name>.url``, and the run's params
bound by name); a date given with the run wins over any source.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from jobserver.batches.spec import GivenWatermark, Watermark
from jobserver.exceptions import InvalidRequest


def read_source(source: Watermark, given: date | None, connections: Any,
                params: Mapping[str, Any] | None = None) -> date | None:
    """The source's newest business date, or None when it has none (yet)."""
    if given is not None or isinstance(source, GivenWatermark):
        return given
    try:
        import jobserver.batches.watermarks as module
    except ImportError:
        raise InvalidRequest("watermark: this server reads only watermarks given with the "
                             "run", [{"field": "watermark",
                                      "message": "file and sql watermarks are not available"}]
                             ) from None
    # The readers' own model of a source; ours has the same fields.
    found: date | None = module.read_watermark(
        module.WatermarkSource.model_validate_json(source.model_dump_json(exclude_none=True)),
        connections, None, dict(params or {}))
    return found
