"""The launcher's banner names the store and the lock backend the nodes run on, as the
config file given with ``jobserver cluster --config FILE`` says (every node loads the
same file), and never a database password."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from jobserver.cli import _config
from jobserver.cluster import LocalCluster
from tests.helpers import write_postgres_cluster_config


def banner_head(config_file: Path) -> str:
    """The banner's first line, for the config ``jobserver cluster --config`` loads."""
    return LocalCluster(_config(str(config_file)), 3).banner([]).splitlines()[0]


def test_a_postgresql_store_and_its_advisory_locks_are_named(pg_url: str,
                                                             tmp_path: Path) -> None:
    url = make_url(pg_url)
    config = write_postgres_cluster_config(tmp_path / "cluster.toml", pg_url,
                                           tmp_path / "data", "banner-test-token-0123456789")
    head = banner_head(config)
    assert head == (f"jobserver cluster: 3 nodes (store: PostgreSQL {url.host}:{url.port}/"
                    f"{url.database}; locks: PostgreSQL advisory locks; single mode)")
    assert "SQLite" not in head and "file locks" not in head


def test_the_password_stays_out_and_the_default_is_sqlite_with_file_locks(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PGPASS", "hunter2-secret")
    config = tmp_path / "cluster.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n'
                      '[database]\nurl = "postgresql://jobs:${PGPASS}@db.example:6543/jobs"\n'
                      '[scheduler]\nmode = "leader"\n'
                      '[api]\ntokens = ["banner-test-token-0123456789"]\n')
    head = banner_head(config)
    assert "PostgreSQL db.example:6543/jobs; locks: file locks; leader mode" in head
    assert "hunter2" not in head and "jobs:" not in head
    default = tmp_path / "default.toml"
    default.write_text(f'data_dir = "{tmp_path / "d"}"\n'
                       '[api]\ntokens = ["banner-test-token-0123456789"]\n')
    assert banner_head(default).endswith(
        f"(store: SQLite {tmp_path / 'd' / 'jobserver.db'}; locks: file locks; single mode)")
