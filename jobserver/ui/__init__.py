"""The web dashboard, served by every node's API at ``/ui/``.

Server-rendered pages (Jinja2 templates under ``templates/ui/``) over the store's
repositories, with small hand-written scripts (``static/ui.js``) for local times,
live refresh and confirmations; nothing to build. A browser signs in with an API
token, and the pages offer what that token's scopes allow (``jobserver.ui.pages``).

A page module (named in :data:`PAGES`) adds its routes to
:data:`jobserver.ui.blueprint.blueprint`, each GET marked ``@ui_page(scope)`` and each
POST ``@ui_action(scope)``; its list page's endpoint is the one ``pages.NAV`` links
(``ui.schedules`` for the view function ``schedules``). Its templates extend
``ui/base.html`` (blocks ``title``, ``content``, ``scripts``) and import
``ui/macros.html``; an element marked ``data-refresh="URL"`` is refreshed from a
fragment route of the page by ``static/ui.js``.
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
