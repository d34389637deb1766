"""The web dashboard, served by every node's API at ``/ui/``.

Server-rendered pages (Jinja2 templates under ``templates/ui/``) over the store's
repositories, with small hand-written scripts (``static/ui.js``) for local times,
live refresh and confirmations; nothing to build. A browser signs in with an API
token, and the pages offer what that token's scopes allow (``jobserver.ui.pages``).
"""

from __future__ import annotations

import importlib

from flask import Flask

#: The page modules, imported by :func:`register` to put their routes on the
#: blueprint; the navigation lists their pages in this order (``pages.NAV``).
PAGES: tuple[str, ...] = ("cluster", "jobs", "job", "schedules", "datasets", "views", "batches")
#: Modules every dashboard has besides its pages: the shared decorators and hooks,
#: and signing in and out.
_CORE = ("pages", "signin")


def register(app: Flask) -> None:
    """Put the dashboard on ``app`` (called by ``create_app``)."""
    from jobserver.ui import pages
    from jobserver.ui.blueprint import blueprint

    for name in (*_CORE, *PAGES):
        importlib.import_module(f"jobserver.ui.{name}")
    app.register_blueprint(blueprint)
    pages.install(app)
