"""The client commands start light: parsing the command line, ``--help`` of every
command, bad usage and a request through :mod:`jobserver.client` import neither
SQLAlchemy nor Flask nor the store nor the API.

Those imports took about half a second of every ``jobserver`` run; only the commands
that open the store (``serve``, ``db upgrade``, ``token``, ``purge``, ``cluster
--nodes``) need them, and import them when they run. Each check runs a fresh
interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Modules (and their submodules) a client command must not import.
HEAVY = ("sqlalchemy", "flask", "jobserver.store", "jobserver.api")

#: Runs in the fresh interpreter: prints the exit codes and the heavy modules loaded.
SCRIPT = """
import contextlib, http.server, io, json, sys, threading

class Jobs(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"jobs": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Jobs)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_port}"

import jobserver.cli
from jobserver.cli import _parser, main
from jobserver.cli.parsing import commands

names = [name for name, _ in commands(_parser())]
codes = {}
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    codes["--help"] = main(["--help"])
    for name in names:
        codes[name + " --help"] = main([*name.split(), "--help"])
    codes["jobs --limit x"] = main(["jobs", "--limit", "x"])
    codes["logs x"] = main(["logs", "x", "--url", url, "--token", "t"])
    codes["jobs"] = main(["jobs", "--url", url, "--token", "t"])
    codes["apply"] = main(["apply", "examples/schedules.yaml", "--dry-run",
                           "--url", "http://127.0.0.1:1", "--token", "t"])
server.shutdown()
heavy = sorted(m for m in sys.modules if m.startswith(HEAVY))
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def run_fresh() -> dict[str, object]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("JOBSERVER_")}  # no config file, URL or token
    result = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{SCRIPT}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    answer: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return answer


def test_client_commands_import_no_store_api_or_flask() -> None:
    answer = run_fresh()
    codes = answer["codes"]
    assert isinstance(codes, dict)
    # What ran is what a user sees: help, bad usage, a listing, an unreachable API.
    assert codes["--help"] == 0 and codes["batch run --help"] == 0
    assert {"schedules list --help", "token create --help", "purge --help"} <= set(codes)
    assert all(code == 0 for name, code in codes.items() if name.endswith("--help"))
    assert codes["jobs --limit x"] == 2 and codes["logs x"] == 2
    assert codes["jobs"] == 0 and codes["apply"] == 1
    assert answer["heavy"] == []
