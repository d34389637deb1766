"""Which environment variables a shell step's own ``env`` may set.

``steps.shell.allowed_executables`` says which programs a step may run; a step's
``env`` must not undo that by changing *what* those programs load or run. A variable
is refused when it

* steers the dynamic loader or the C library into loading other code or files:
  ``LD_*`` (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``LD_AUDIT``), ``DYLD_*``,
  ``GCONV_PATH``, ``GLIBC_TUNABLES``, ``MALLOC_*``, ``LOCPATH``, ``NLSPATH``,
  ``HOSTALIASES``, ``RESOLV_HOST_CONF``, ``OPENSSL_CONF`` and its engine/module paths;
* runs code when a shell starts, or lets its input run code: ``BASH_ENV``, ``ENV``,
  ``BASH_FUNC_*`` (exported functions), ``SHELLOPTS``, ``BASHOPTS``, ``PS4`` (expanded
  under ``xtrace``), ``PROMPT_COMMAND``, ``IFS``, ``CDPATH``, ``BASH_LOADABLES_PATH``;
* decides which program a name runs: ``PATH`` (the node's own passes through
  ``steps.shell.env_passthrough``);
* makes an interpreter load code at start or from another module path: Python's
  ``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP``, ``PYTHONUSERBASE``,
  ``PYTHONPYCACHEPREFIX``, ``PYTHONPLATLIBDIR``, ``PYTHONWARNINGS`` (imports the
  category's module), ``PYTHONBREAKPOINT``, ``PYTHONEXECUTABLE``; Perl's ``PERL5LIB``,
  ``PERLLIB``, ``PERL5OPT``, ``PERL5DB``; Ruby's ``RUBYOPT``, ``RUBYLIB``; Node's
  ``NODE_OPTIONS``, ``NODE_PATH``; Java's ``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS``,
  ``JDK_JAVA_OPTIONS``, ``CLASSPATH``; Lua's ``LUA_INIT*``, ``LUA_PATH*``,
  ``LUA_CPATH*``; PHP's ``PHPRC``, ``PHP_INI_SCAN_DIR``;
* names a command another program runs for it: ``GIT_SSH``, ``GIT_SSH_COMMAND``,
  ``GIT_PROXY_COMMAND``, ``GIT_ASKPASS``, ``GIT_EXEC_PATH``, ``GIT_CONFIG_*`` (any
  setting, ``core.sshCommand`` among them), ``GIT_EXTERNAL_DIFF``, ``SSH_ASKPASS``;
* is the engine's own: ``JOBSERVER_*`` (the run's claim, the node's URL, the params
  as data);
* or is listed by the operator in ``steps.shell.denied_env`` (``NAME``, or ``PREFIX*``).

Names compare case-insensitively. The rule is checked where every job is validated
(:func:`jobserver.spec.validate_job`: a submit, a batch submit, a schedule's, view's
or batch config's template, every planner's launch), naming ``steps[i].env.NAME``, and
again when a shell step starts (:func:`jobserver.steps.shell.build_env`), for jobs
stored before the rule. Variables the operator passes through are the operator's
choice and are not checked.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

#: Refused names, each with what it would change.
_NAMES: dict[str, str] = {
    **dict.fromkeys(("GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES",
                     "RESOLV_HOST_CONF", "OPENSSL_CONF", "OPENSSL_ENGINES",
                     "OPENSSL_MODULES"), "what the C library or the loader loads"),
    **dict.fromkeys(("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
                     "IFS", "CDPATH", "BASH_LOADABLES_PATH"), "what a shell runs"),
    "PATH": "which program a name runs (the node's PATH is passed through: "
            "steps.shell.env_passthrough)",
    **dict.fromkeys(("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                     "PYTHONPYCACHEPREFIX", "PYTHONPLATLIBDIR", "PYTHONWARNINGS",
                     "PYTHONBREAKPOINT", "PYTHONEXECUTABLE", "PERL5LIB", "PERLLIB",
                     "PERL5OPT", "PERL5DB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS",
                     "NODE_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
                     "CLASSPATH", "PHPRC", "PHP_INI_SCAN_DIR"),
                    "what an interpreter loads or runs"),
    **dict.fromkeys(("GIT_SSH", "GIT_SSH_COMMAND", "GIT_PROXY_COMMAND", "GIT_ASKPASS",
                     "GIT_EXEC_PATH", "GIT_EXTERNAL_DIFF", "SSH_ASKPASS"),
                    "which command a program runs for it"),
}
#: Refused prefixes, each with what it would change.
_PREFIXES: dict[str, str] = {
    "LD_": "what the dynamic loader loads",
    "DYLD_": "what the dynamic loader loads",
    "MALLOC_": "how the C library allocates (and where it writes traces)",
    "BASH_FUNC_": "what a shell runs (an exported function)",
    "LUA_INIT": "what an interpreter loads or runs",
    "LUA_PATH": "what an interpreter loads or runs",
    "LUA_CPATH": "what an interpreter loads or runs",
    "GIT_CONFIG": "which command a program runs for it (any git setting)",
    "JOBSERVER_": "what the node sets for the step itself",
}
OPERATOR = "listed in steps.shell.denied_env"


class EnvRule:
    """The built-in refusals plus the operator's ``steps.shell.denied_env`` (names, or
    prefixes written ``PREFIX*``). Immutable; build one with :func:`env_rule`."""

    def __init__(self, denied: Iterable[str] = ()) -> None:
        entries = [entry.upper() for entry in denied]
        self._names = {**_NAMES, **dict.fromkeys(
            (e for e in entries if not e.endswith("*")), OPERATOR)}
        self._prefixes = {**_PREFIXES, **dict.fromkeys(
            (e[:-1] for e in entries if e.endswith("*")), OPERATOR)}

    def refusal(self, name: str) -> str | None:
        """Why a step's ``env`` may not set ``name``; None when it may."""
        upper = name.upper()
        reason = self._names.get(upper) or next(
            (why for prefix, why in self._prefixes.items() if upper.startswith(prefix)), None)
        if reason is None:
            return None
        if reason == OPERATOR:
            return f"a step may not set {name}: it is {OPERATOR}"
        return f"a step may not set {name}: it changes {reason}"

    def refused(self, env: Iterable[str]) -> dict[str, str]:
        """Each name of ``env`` the rule refuses, with why, in ``env``'s order."""
        found = {}
        for name in env:
            reason = self.refusal(name)
            if reason is not None:
                found[name] = reason
        return found


@functools.lru_cache(maxsize=16)
def env_rule(denied: tuple[str, ...] = ()) -> EnvRule:
    """The rule for an operator's ``denied_env`` (built once per distinct list)."""
    return EnvRule(denied)
