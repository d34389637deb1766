"""How a planner resource is named: a namespace and a name, each an identifier.

Every planner names what users declare the same way (``namespace/name`` in paths,
``name`` alone meaning the ``default`` namespace), so the rule lives in the core, where
the API's shared OpenAPI helpers and every planner read it.
"""

from __future__ import annotations

#: One identifier: 1 to 64 letters, digits, ``_``, ``.`` or ``-``, starting with a
#: letter or digit; never ``/``, so that ``namespace/name`` splits one way.
IDENT = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
