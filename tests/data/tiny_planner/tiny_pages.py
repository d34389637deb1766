"""The tiny planner's dashboard page: a route on the dashboard's blueprint, marked with
the scope it needs like every page."""

from __future__ import annotations

from flask import render_template_string

from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import ui_page

PAGE = """{% extends "ui/base.html" %}
{% block title %}Tiny{% endblock %}
{% block content %}<h1>The tiny planner</h1>{% endblock %}"""


@blueprint.get("/tiny")
@ui_page("read")
def tiny() -> str:
    return render_template_string(PAGE)
