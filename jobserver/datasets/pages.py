"""The datasets pages: every dataset; one dataset's partitions, filtered with the
filter grammar (``where=``, as the API's query) and a key range, page by page, and
its consumers with lag, working-set counts and FAILED partitions with their errors.

Reads (:mod:`jobserver.datasets.page_board`): a page of 50 datasets by (namespace,
name); for one dataset its row, a page of 50 partitions by the (dataset_id, id)
index with the conditions as WHERE clauses, and each consumer's view as
``GET …/consumers`` reads it. Conditions the grammar refuses answer 422 with the
page and the parser's messages.
"""

from __future__ import annotations

import re
from typing import Any

from flask import render_template, request, url_for
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.requests import MAX_ID
from jobserver.datasets.api import NAME_CURSOR
from jobserver.datasets.filters import MAX_CONDITIONS
from jobserver.datasets.page_board import (COUNT_CAP, PartitionQuery, dataset_page,
                                           dataset_rows, partition_counts)
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import ui_page
from jobserver.ui.planners import add_tones

#: Condition inputs the filter form shows at most (the grammar takes 16 in all).
FORM_CONDITIONS = MAX_CONDITIONS

# The states of partitions in a consumer's working set.
add_tones({"NEW": "waiting", "IN_PROGRESS": "running"})


@blueprint.get("/datasets")
@ui_page(READ)
def datasets() -> ResponseReturnValue:
    text = request.args.get("after", "")
    after = tuple(text.split("/", 1)) if re.fullmatch(NAME_CURSOR, text) else None
    rows, following = dataset_rows(api().store, after=after)  # type: ignore[arg-type]
    next_url = url_for("ui.datasets", after="/".join(following)) if following else None
    counts = partition_counts(api().store, [row.id for row in rows])
    return render_template("ui/datasets.html", rows=rows, next_url=next_url,
                           counts=counts, count_cap=COUNT_CAP)


def _query() -> PartitionQuery:
    args = request.args
    where = tuple(text.strip() for text in args.getlist("where") if text.strip())
    cursor = args.get("cursor", "")
    return PartitionQuery(
        where=where, key_field=args.get("field") or None, low=args.get("from") or None,
        high=args.get("to") or None, newest_first=args.get("order") != "oldest",
        cursor=int(cursor) if cursor.isdigit() and int(cursor) <= MAX_ID else None)


def _page_args(query: PartitionQuery, **changed: Any) -> dict[str, Any]:
    """The query string of ``query`` (with ``changed``), for the pager's links."""
    found: dict[str, Any] = {"where": list(query.where), "field": query.key_field,
                             "from": query.low, "to": query.high,
                             "order": None if query.newest_first else "oldest"}
    found.update(changed)
    return {name: value for name, value in found.items() if value}


@blueprint.get("/datasets/<namespace>/<name>")
@ui_page(READ)
def dataset(namespace: str, name: str) -> ResponseReturnValue:
    query = _query()
    page = dataset_page(api().store, namespace, name, query)
    next_url = (url_for("ui.dataset", namespace=namespace, name=name,
                        **_page_args(query, cursor=page.next_cursor))
                if page.next_cursor else None)
    first_url = (url_for("ui.dataset", namespace=namespace, name=name, **_page_args(query))
                 if query.cursor else None)
    return render_template("ui/dataset.html", page=page, dataset=page.dataset, query=query,
                           next_url=next_url, first_url=first_url,
                           form_conditions=FORM_CONDITIONS,
                           active_nav="ui.datasets"), 422 if page.problems else 200
