"""Reading a system's watermark: the newest business date its source has.

``{given: true}`` is the date passed with the run (``--watermark``). The file and SQL
sources are read by :func:`jobserver.batches.watermarks.read_watermark` (a query on the
node's named connections, ``connections.<name>.url``, with the run's params bound by
name; a file under ``batches.watermark_dir``), under its rules: read-only, bounded,
nothing read echoed. A date given with the run wins over any source.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from jobserver.batches.spec import GivenWatermark, Watermark
from jobserver.batches.watermarks import Sources, WatermarkSource, read_watermark


def read_source(source: Watermark, given: date | None, sources: Sources | None,
                params: Mapping[str, Any] | None = None) -> date | None:
    """The source's newest business date, or None when it has none (yet)."""
    if given is not None or isinstance(source, GivenWatermark):
        return given
    # The readers' own model of a source; ours has the same fields.
    found: date | None = read_watermark(
        WatermarkSource.model_validate_json(source.model_dump_json(exclude_none=True)),
        sources, None, dict(params or {}))
    return found
