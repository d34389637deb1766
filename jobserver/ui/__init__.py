"""The web dashboard, served by every node's API at ``/ui/``.

Server-rendered pages (Jinja2 templates under ``templates/ui/``) over the store's
repositories, with small hand-written scripts (``static/ui.js``) for local times,
live refresh and confirmations; nothing to build. A browser signs in with an API
token, and the pages offer what that token's scopes allow (``jobserver.ui.pages``).

A page module (the engine's, named in :data:`PAGES`, or a planner's,
:meth:`jobserver.planners.base.Planner.pages`) adds its routes to
:data:`jobserver.ui.blueprint.blueprint`, each GET marked ``@ui_page(scope)`` and each
POST ``@ui_action(scope)``; its list page's endpoint is the one the navigation links
(``ui.schedules`` for the view function ``schedules``). Its templates extend
``ui/base.html`` (blocks ``title``, ``content``, ``scripts``) and import
``ui/macros.html``; an element marked ``data-refresh="URL"`` is refreshed from a
fragment route of the page by ``static/ui.js``.

This package is the dashboard's shell and knows no planner: a planner's page modules
live in its own package (the schedules planner's ``pages`` module), and the shell
reaches them only through :func:`jobserver.planners.installed`. Their templates stay in this
blueprint's template folder (``templates/ui/schedules.html``, shared pieces in
``ui/planner_macros.html``), where Flask looks them up by name; the colours of their
own states they give with :func:`jobserver.ui.planners.add_tones`.
"""

from __future__ import annotations

import importlib

from flask import Flask

#: The engine's page modules, imported by :func:`register` to put their routes on
#: the blueprint (the navigation: ``pages.NAV``, then the planners' pages).
PAGES: tuple[str, ...] = ("cluster", "jobs", "job", "api_doc")
#: Modules every dashboard has besides its pages: the shared decorators and hooks,
#: and signing in and out.
_CORE = ("pages", "signin")


def register(app: Flask) -> None:
    """Put the dashboard on ``app`` (called by ``create_app``)."""
    from jobserver.planners import installed
    from jobserver.ui import pages
    from jobserver.ui.blueprint import blueprint

    planned = [page for planner in installed() for page in planner.pages()]
    for name in (*_CORE, *PAGES):
        importlib.import_module(f"jobserver.ui.{name}")
    for page in planned:
        importlib.import_module(page.module)
    app.register_blueprint(blueprint)
    pages.install(app, [(page.label, page.endpoint) for page in planned])
