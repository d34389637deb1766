"""Scenario 7 — the floor: ``pgbench -N`` with 10 clients on the same server.

``-N`` skips the updates of the two small tables, leaving per transaction one UPDATE of
``pgbench_accounts``, one SELECT and one INSERT into ``pgbench_history``, committed
durably (the server's own settings, synchronous_commit on): the rate of one small
durable transaction, to read our jobs/s against.
"""

from __future__ import annotations

import re
import subprocess

from bench.common import Options, log, shell_quote, write_result
from bench.stores import pg_database


def run(opts: Options) -> list[dict]:
    seconds = opts.scale(20, 1)
    rows = []
    with pg_database("pgbench") as url:
        dbname = url.rsplit("/", 1)[1]
        base = ["pgbench", "-h", "127.0.0.1", "-U", "postgres"]
        subprocess.run(base + ["-i", "-q", "-s", str(opts.scale(10, 1)), dbname], check=True,
                       capture_output=True)
        for clients in (10, 1):
            argv = base + ["-N", "-c", str(clients), "-j", "2", "-T", str(seconds), dbname]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            match = re.search(r"tps = ([\d.]+)", out)
            latency = re.search(r"latency average = ([\d.]+) ms", out)
            rows.append({"clients": clients, "tps": float(match.group(1)) if match else None,
                         "latency_ms": float(latency.group(1)) if latency else None,
                         "seconds": seconds, "command": shell_quote(argv)})
            log(f"pgbench -N -c {clients}: {rows[-1]['tps']} tps")
    write_result("floor", opts, rows)
    return rows
