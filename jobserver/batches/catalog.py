"""The ``BatchConfig`` resources users put, read and delete.

A run names a system, not a config, so a system belongs to one config only: a put
that declares a system another config declares is a :class:`Conflict` naming both.
"""

from __future__ import annotations

import builtins

from sqlalchemy import Connection, delete, insert, select, update

from jobserver.batches.records import ConfigRecord, PutResult
from jobserver.batches.spec import BatchConfig, load_spec
from jobserver.batches.tables import batch_configs
from jobserver.exceptions import Conflict, NotFound
from jobserver.resources import CREATED, UNCHANGED, plan_put
from jobserver.store import Transactions
from jobserver.store.engine import store_now


class BatchConfigCatalog:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def put(self, config: BatchConfig, dry_run: bool = False) -> PutResult:
        """Create or replace the config named ``config.name``; nothing on a dry run."""
        document = config.spec.model_dump(mode="json")
        digest = config.digest()
        systems = [entry.system for entry in config.spec.system_stage_mapping]
        with self._tx.write() as conn:
            self._check_systems(conn, config.name, systems)
            row = conn.execute(select(batch_configs).where(
                batch_configs.c.name == config.name)).mappings().first()
            change, changed = plan_put(row, document, digest)
            if dry_run or change == UNCHANGED:
                return PutResult(None if row is None else ConfigRecord.from_row(row),
                                 change, changed)
            values = {"spec": document, "spec_hash": digest, "systems": systems,
                      "updated_at": store_now()}
            if change == CREATED:
                conn.execute(insert(batch_configs).values(name=config.name,
                                                          created_at=store_now(), **values))
            else:
                conn.execute(update(batch_configs).where(batch_configs.c.name == config.name)
                             .values(**values))
            return PutResult(self._get(conn, config.name), change, changed)

    @staticmethod
    def _check_systems(conn: Connection, name: str, systems: builtins.list[str]) -> None:
        for other, declared in conn.execute(select(batch_configs.c.name,
                                                   batch_configs.c.systems)
                                            .where(batch_configs.c.name != name)):
            shared = sorted(set(declared) & set(systems))
            if shared:
                raise Conflict(f"system {shared[0]!r} is declared by batch config {other!r} "
                               "already", {"field": "system_stage_mapping",
                                           "config": other, "systems": shared})

    def get(self, name: str) -> ConfigRecord:
        with self._tx.read() as conn:
            return self._get(conn, name)

    @staticmethod
    def _get(conn: Connection, name: str) -> ConfigRecord:
        row = conn.execute(select(batch_configs).where(
            batch_configs.c.name == name)).mappings().first()
        if row is None:
            raise NotFound(f"batch config {name!r} does not exist", {"name": name})
        return ConfigRecord.from_row(row)

    def list(self) -> builtins.list[ConfigRecord]:
        with self._tx.read() as conn:
            rows = conn.execute(select(batch_configs).order_by(batch_configs.c.name))
            return [ConfigRecord.from_row(row) for row in rows.mappings()]

    def delete(self, name: str) -> None:
        """Delete the config; the control table keeps its batches."""
        with self._tx.write() as conn:
            if conn.execute(delete(batch_configs).where(
                    batch_configs.c.name == name)).rowcount == 0:
                raise NotFound(f"batch config {name!r} does not exist", {"name": name})

    def for_system(self, system: str) -> BatchConfig | None:
        """The config that declares ``system``, or None."""
        for record in self.list():
            if system in record.systems:
                return load_spec(record.spec)
        return None
