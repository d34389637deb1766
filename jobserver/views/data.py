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
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

from jobserver.datasets.keys import KeyValueError, PartitionKey
from jobserver.datasets.repos import dataset_catalog
from jobserver.datasets.tables import KEY_COLUMNS, partitions
from jobserver.store import Store
from jobserver.views.model import ViewAddress
from jobserver.views.templates import render_location

FLAG = "_SUCCESS"


def confined(template: str, location: str) -> bool:
    """Whether ``location`` (``template`` filled) stays under the part of the template
    written before its first placeholder: a parameter value may name a partition's
    directory, never climb out of the tree the view's author chose (``..``, say, or
    values that join into one). Values are checked for this already
    (:func:`~jobserver.views.spec.value_fits`); this is the rule at the filesystem."""
    fixed = template.split("${", 1)[0] if "${" in template else template
    if fixed == template:
        return True
    base = fixed.rsplit("/", 1)[0] if "/" in fixed else ""
    normal, normal_base = os.path.normpath(location or "."), os.path.normpath(base or ".")
    if normal_base == ".":
        return not (normal == ".." or normal.startswith("../") or os.path.isabs(normal))
    return normal == normal_base or normal.startswith(normal_base.rstrip("/") + "/")


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
        self._catalog = dataset_catalog(store)
        self._views = views
        self._root = root
        self._datasets: dict[str, tuple[int, PartitionKey] | None] = {}

    def __call__(self, address: ViewAddress) -> datetime | None:
        spec = self._views.get(address.name)
        location = getattr(spec, "location", None) if spec is not None else None
        if spec is not None and location:
            filled = render_location(spec, address) or ""
            found = flag_time(filled, self._root) if confined(location, filled) else None
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
                record = self._catalog.find_or_none(conn, address.package, address.view)
            self._datasets[address.name] = (None if record is None
                                            else (record.id, record.partition_key))
        return self._datasets[address.name]
