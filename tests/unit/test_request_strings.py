"""Request strings are data, never code (the lesson of Apache Kylin's CVEs of 2020-2022:
command injection through request strings, unsafe deserialization, code loaded by name).

* A static scan of the product code: no pickle/marshal/shelve, no YAML loading but
  ``safe_load``, no eval/exec/compile/__import__, no ``shell=True``, no
  ``os.system``/``os.popen``, and ``importlib`` only where the module name comes from
  the operator, never a request.
* Shell steps run their argv without a shell: metacharacters stay literal, and a
  command line in ``argv[0]`` is an executable that does not exist.
* Python steps resolve registered names only; a module path is never imported.
"""

from __future__ import annotations

import ast
import sys
import threading
from pathlib import Path

import pytest

from jobserver.config import ShellStepConfig
from jobserver.states import State
from jobserver.steps import StepContext
from jobserver.steps.python import PythonSteps
from jobserver.steps.shell import run_shell

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("jobserver", "schedulers", "locks")

#: Where importing by name is allowed, and why: the name comes from the operator.
IMPORTLIB_ALLOWED = {
    "locks/__init__.py",          # lock backend module by ``lock.backend`` (a fixed table)
    "jobserver/steps/python.py",  # ``importlib.metadata`` entry points installed by the operator
    "jobserver/listeners.py",     # listener classes named in ``scheduler.listeners``
    "jobserver/ui/__init__.py",   # the dashboard's page modules: ``PAGES`` and the planners'
    "jobserver/planners/__init__.py",  # ``BUILT_IN`` (a fixed tuple) and the operator's entry points
}
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                     "jsonpickle"}
#: YAML may be read only with ``yaml.safe_load``/``safe_load_all``/``SafeLoader``.
UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load",
               "full_load_all", "Loader", "UnsafeLoader", "FullLoader", "CLoader",
               "CUnsafeLoader", "CFullLoader"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
SUBPROCESS_CALLS = {"Popen", "run", "call", "check_call", "check_output"}
FORBIDDEN_ATTRIBUTES = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"),
                        ("subprocess", "getstatusoutput"), ("pkgutil", "resolve_name")}


def _sources() -> list[Path]:
    files = [path for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 20, "the scan found too few files: wrong root?"
    return files


def _findings(source: str, relative: str) -> list[str]:
    tree = ast.parse(source, filename=relative)
    found = []
    for node in ast.walk(tree):
        where = f"{relative}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            for name in names:
                top = name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    found.append(f"{where}: imports {name}")
                if top == "importlib" and relative not in IMPORTLIB_ALLOWED:
                    found.append(f"{where}: imports {name} outside the allowed modules")
            if isinstance(node, ast.ImportFrom) and names[0].split(".")[0] == "yaml":
                found += [f"{where}: imports yaml.{alias.name}" for alias in node.names
                          if alias.name in UNSAFE_YAML]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "yaml" and node.attr in UNSAFE_YAML):
            found.append(f"{where}: uses yaml.{node.attr}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{where}: calls {func.id}()")
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and (func.value.id, func.attr) in FORBIDDEN_ATTRIBUTES):
                found.append(f"{where}: calls {func.value.id}.{func.attr}()")
            if isinstance(func, ast.Attribute) and func.attr == "import_module" \
                    and relative not in IMPORTLIB_ALLOWED:
                found.append(f"{where}: calls import_module()")
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            for keyword in node.keywords if name in SUBPROCESS_CALLS else []:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant)
                                                   and keyword.value.value is False):
                    found.append(f"{where}: passes shell={ast.unparse(keyword.value)}")
    return found


def test_product_code_never_turns_strings_into_code() -> None:
    findings = [finding for path in _sources()
                for finding in _findings(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert findings == []


def test_the_scan_sees_what_it_looks_for() -> None:
    """The scan itself can fail: each forbidden construct in a file is reported."""
    found = _findings("import pickle\nimport yaml\nimport importlib\n"
                      "yaml.load(open('f'), Loader=yaml.Loader)\nyaml.safe_load('a: 1')\n"
                      "from yaml import unsafe_load\n"
                     "eval('1')\nexec('x = 1')\n__import__('os')\n"
                     "import os, subprocess\nos.system('true')\n"
                     "subprocess.run('true', shell=True)\n"
                     "importlib.import_module('json')\n", "jobserver/probe.py")
    assert not any(finding.startswith("jobserver/probe.py:5:") for finding in found)  # safe
    for what in ("imports pickle", "uses yaml.load", "uses yaml.Loader", "imports yaml.unsafe_load",
                 "imports importlib outside", "calls eval()",
                 "calls exec()", "calls __import__()", "calls os.system()", "shell=True",
                 "calls import_module()"):
        assert any(what in finding for finding in found), (what, found)


def _ctx(tmp_path: Path, **shell: object) -> StepContext:
    return StepContext(job_id=1, job_name="j", step="s", attempt=1, job_attempt=1, fence=1,
                       node="n", params={}, shell=ShellStepConfig(**shell),
                       cancelled=threading.Event())


def test_a_command_line_in_argv0_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for argv in ([f"sh -c 'touch {marker}'"], [f"touch {marker}"], [f"true; touch {marker}"],
                 [f"$(touch {marker})"]):
        outcome = run_shell({"argv": argv}, _ctx(tmp_path))
        assert outcome.state is State.ERROR and "cannot start" in (outcome.error or ""), argv
        assert outcome.retryable is False
    assert not marker.exists()


def test_shell_metacharacters_stay_literal(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    words = [f"$(touch {marker})", f"`touch {marker}`", ";", "touch", str(marker), "&&",
             f"touch {marker}", "|", "cat", "$HOME", "*", ">", str(marker)]
    outcome = run_shell({"argv": ["echo", *words]}, _ctx(tmp_path))
    assert outcome.state is State.SUCCEED, outcome
    assert (outcome.output or "").strip() == " ".join(words)
    assert not marker.exists()


def test_python_steps_never_import_a_named_module(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a name that reached the runner without validation (say, a row written to
    the store by hand) is looked up among registered callables, never imported."""
    module = "jobserver_probe_runner_never_imports"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                           "def fn(ctx):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    steps = PythonSteps()
    for name in (f"{module}:fn", f"{module}.fn", "os.system", "builtins.eval"):
        assert not steps.is_registered(name)
        outcome = steps.run({"callable": name, "args": {}}, _ctx(tmp_path))
        assert outcome.state is State.ERROR, name
    assert not marker.exists() and module not in sys.modules
