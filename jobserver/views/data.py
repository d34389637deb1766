"""When a noop view partition's data appeared (``data_time`` for the planner).

Data arrives from outside: either a ``_SUCCESS`` flag under the view's ``location``
template (``${param}`` filled with the partition's values; local paths only, a
relative one under ``views.data_root``: the flag's modification time is the data's
time), or a partition registered in the
dataset named like the view (``package/View`` is dataset ``package`` / ``View``)
whose key fields, in declared order, hold the partition's values: its time is the
partition's ``created_at``. Neither: None (no data).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

from jobserver.datasets.keys import KeyValueError, PartitionKey
from jobserver.datasets.tables import KEY_COLUMNS, partitions
from jobserver.store import Store
from jobserver.views.model import ViewAddress

FLAG = "_SUCCESS"
_PARAM = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill(template: str, names: list[str], values: tuple[str | None, ...]) -> str:
    """``template`` with each ``${name}`` replaced by that parameter's value."""
    known = {name: "" if value is None else value for name, value in zip(names, values)}
    return _PARAM.sub(lambda match: known.get(match.group(1), match.group(0)), template)


def parameter_names(spec: Any) -> list[str]:
    return [getattr(item, "name", item) for item in getattr(spec, "parameters", []) or []]


def flag_time(location: str, root: Path | None = None) -> datetime | None:
    """The ``_SUCCESS`` flag's modification time under a local ``location`` (a
    relative one under ``root``: ``views.data_root``)."""
    path = location[len("file://"):] if location.startswith("file://") else location
    if "://" in path:
        return None  # not a local path: only datasets can say
    if root is not None:
        path = os.path.join(root, path)  # an absolute path stays as it is
    try:
        stamp = os.stat(os.path.join(path, FLAG)).st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, timezone.utc)


class DataTimes:
    """``data_time(address)`` over the definitions ``views`` and ``store``'s datasets."""

    def __init__(self, store: Store, views: Mapping[str, Any],
                 root: Path | None = None) -> None:
        self._store = store
        self._views = views
        self._root = root
        self._datasets: dict[str, tuple[int, PartitionKey] | None] = {}

    def __call__(self, address: ViewAddress) -> datetime | None:
        spec = self._views.get(address.name)
        location = getattr(spec, "location", None) if spec is not None else None
        if location:
            found = flag_time(fill(location, parameter_names(spec), address.values),
                              self._root)
            if found is not None:
                return found
        return self._registered(address)

    def _registered(self, address: ViewAddress) -> datetime | None:
        dataset = self._dataset(address)
        if dataset is None:
            return None
        dataset_id, key = dataset
        if len(key.fields) != len(address.values) or None in address.values:
            return None
        try:
            typed = {item.name: item.from_text(value)  # type: ignore[arg-type]
                     for item, value in zip(key.fields, address.values)}
        except KeyValueError:
            return None
        columns = key.columns(typed)
        with self._store.tx.read() as conn:
            found = conn.execute(select(partitions.c.created_at).where(
                partitions.c.dataset_id == dataset_id,
                *(partitions.c[name] == text for name, text in zip(KEY_COLUMNS, columns)))
            ).scalar()
        return found

    def _dataset(self, address: ViewAddress) -> tuple[int, PartitionKey] | None:
        if address.name not in self._datasets:
            with self._store.tx.read() as conn:
                record = self._store.datasets.find_or_none(conn, address.package, address.view)
            self._datasets[address.name] = (None if record is None
                                            else (record.id, record.partition_key))
        return self._datasets[address.name]
