"""The dashboard's one blueprint, on which every page module registers its routes.

Page modules (``jobserver.ui.PAGES``) import it and add routes at their import;
:func:`jobserver.ui.register` imports them all before the blueprint is registered
on an app (Flask refuses routes added after that).
"""

from __future__ import annotations

from flask import Blueprint

blueprint = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates",
                      static_folder="static")
