"""``jobserver datasets list|show|delete``, ``jobserver partitions list|add|delete``
and ``jobserver consumers list|show|reset-failed|delete``.

Client commands over the API; ``jobserver datasets`` alone lists the datasets. A
dataset is named ``namespace/name``; a bare ``name``
is in the namespace ``default``. Datasets are created and changed declaratively with
``jobserver apply`` (``kind: Dataset`` and ``kind: Consumer``: :class:`DatasetResource`,
:class:`ConsumerResource`). A key on the command line is ``--key
field=value`` once per field, each value written as text and read as its field's type
(the dataset's declaration is fetched first); bad input exits with 2 before anything
is sent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobserver.apply import DELETED, UNCHANGED, Outcome, PutResource, checked_name
from jobserver.cli.parsing import split_name
from jobserver.cli.views import table
from jobserver.client import ApiError, Client
from jobserver.datasets.keys import KeyValueError, PartitionKey
from jobserver.datasets.limits import MAX_BATCH
from jobserver.exceptions import ConfigError


def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``datasets`` and ``partitions`` with their actions."""
    datasets = sub.add_parser("datasets", help="list, show and delete datasets (create "
                                               "them with apply)")
    actions = datasets.add_subparsers(dest="datasets_action", metavar="ACTION",
                                      help="what to do (default: list)")
    listing = actions.add_parser("list", help="datasets by namespace and name")
    listing.add_argument("--namespace", help="only datasets in this namespace")
    listing.add_argument("--limit", type=int, default=100, help="at most this many "
                                                                "(default 100)")
    datasets.set_defaults(namespace=None, limit=100)  # `datasets` alone lists them
    commands = [datasets, listing]
    for action, text in (("show", "one dataset as JSON, with its partition count"),
                         ("delete", "delete a dataset with all its partitions")):
        command = actions.add_parser(action, help=text)
        command.add_argument("dataset", help="NAMESPACE/NAME, or NAME in 'default'")
        commands.append(command)
    commands += _partitions_parser(sub) + _consumers_parser(sub)
    for command in commands:
        client_options(command)
        command.set_defaults(run=run)


def _partitions_parser(sub: Any) -> list[argparse.ArgumentParser]:
    partitions = sub.add_parser("partitions", help="list, add and delete a dataset's "
                                                   "partitions")
    actions = partitions.add_subparsers(dest="partitions_action", required=True,
                                        metavar="ACTION", help="what to do")
    listing = actions.add_parser("list", help="partitions, newest first")
    listing.add_argument("--where", action="append", default=[], metavar="CONDITION",
                         help="e.g. 'date >= 2026-11-01', 'shop in (a, b)', "
                              "'meta.source = x'; repeat: all must hold")
    listing.add_argument("--oldest", action="store_true", help="oldest first")
    listing.add_argument("--limit", type=int, default=50, help="at most this many "
                                                               "(default 50)")
    listing.add_argument("--json", action="store_true", help="the page as JSON")
    add = actions.add_parser("add", help="add one partition (--key, --location) or the "
                                         "partitions of a JSON file")
    add.add_argument("--location", help="where the partition's data is (with --key)")
    add.add_argument("--metadata", help="a JSON object")
    add.add_argument("--if-absent", action="store_true", help="skip keys that exist")
    delete = actions.add_parser("delete", help="remove partitions by key")
    delete.add_argument("--missing-ok", action="store_true", help="skip keys that do "
                                                                   "not exist")
    for command in (add, delete):
        command.add_argument("--key", action="append", default=[], metavar="FIELD=VALUE",
                             help="one field of the partition's key; once per field")
        command.add_argument("--file", help="JSON: a partition (or key), a list of them, "
                                            "or - for stdin")
    commands = [listing, add, delete]
    for command in commands:
        command.add_argument("dataset", help="NAMESPACE/NAME, or NAME in 'default'")
    return commands


def _consumers_parser(sub: Any) -> list[argparse.ArgumentParser]:
    consumers = sub.add_parser("consumers", help="a dataset's consumers: their lag and "
                                                 "working sets (declare them with apply)")
    actions = consumers.add_subparsers(dest="consumers_action", required=True,
                                       metavar="ACTION", help="what to do")
    listing = actions.add_parser("list", help="the dataset's consumers with their lag "
                                              "and working-set counts")
    listing.add_argument("dataset", help="NAMESPACE/NAME, or NAME in 'default'")
    commands = [listing]
    for action, text in (("show", "one consumer as JSON: pointer, working set, FAILED "
                                  "partitions with their errors, lag"),
                         ("reset-failed", "put its FAILED partitions back to NEW"),
                         ("delete", "delete the consumer and its working set")):
        command = actions.add_parser(action, help=text)
        command.add_argument("dataset", help="NAMESPACE/NAME, or NAME in 'default'")
        command.add_argument("consumer", help="the consumer's name")
        commands.append(command)
    return commands


def run(args: argparse.Namespace, client: Client) -> int:
    if args.command == "partitions":
        return _partitions(args, client)
    if args.command == "consumers":
        return _consumers(args, client)
    action = args.datasets_action or "list"
    if action == "list":
        page = client.datasets(namespace=args.namespace, limit=args.limit)
        print(datasets_view(page["datasets"]))
        return 0
    namespace, name = split_name(args.dataset)
    if action == "show":
        print(json.dumps(client.resource("datasets", namespace, name), indent=2))
    else:
        client.delete_resource("datasets", namespace, name)
        print(f"dataset {namespace}/{name}: deleted")
    return 0


def _consumers(args: argparse.Namespace, client: Client) -> int:
    namespace, name = split_name(args.dataset)
    base = f"/api/v1/datasets/{namespace}/{name}/consumers"
    action = args.consumers_action
    if action == "list":
        print(consumers_view(client.request("GET", base)["consumers"]))
        return 0
    path = f"{base}/{args.consumer}"
    if action == "show":
        print(json.dumps(client.request("GET", path), indent=2))
    elif action == "reset-failed":
        reset = client.request("POST", f"{path}/reset-failed")["reset"]
        print(f"consumer {namespace}/{name}/{args.consumer}: {reset} FAILED partition(s) "
              "back to NEW")
    else:
        client.request("DELETE", path)
        print(f"consumer {namespace}/{name}/{args.consumer}: deleted")
    return 0


def _partitions(args: argparse.Namespace, client: Client) -> int:
    namespace, name = split_name(args.dataset)
    action = args.partitions_action
    if action == "list":
        page = client.partitions(namespace, name, where=args.where or None,
                                 order="oldest" if args.oldest else "newest",
                                 limit=args.limit)
        print(json.dumps(page, indent=2) if args.json else partitions_view(page["partitions"]))
        return 0
    # A file is read before anything is asked of the API: a bad one is bad usage.
    from_file = _file_items(args.file) if args.file else None
    key = PartitionKey.of(client.resource("datasets", namespace, name)["key"])
    if action == "add":
        items = from_file or [_one_partition(args, key)]
        added, skipped = 0, 0
        for start in range(0, len(items), MAX_BATCH):
            reply = client.add_partitions(namespace, name, {
                "partitions": items[start:start + MAX_BATCH], "if_absent": args.if_absent})
            added, skipped = added + reply["added"], skipped + len(reply["skipped"])
        print(f"dataset {namespace}/{name}: {added} partition(s) added"
              + (f", {skipped} skipped (existing)" if skipped else ""))
        return 0
    keys = from_file or [_key(args.key, key)]
    reply = client.delete_partitions(namespace, name, {"keys": keys,
                                                       "missing_ok": args.missing_ok})
    missing = len(reply["missing"])
    print(f"dataset {namespace}/{name}: {reply['deleted']} partition(s) deleted"
          + (f", {missing} did not exist" if missing else ""))
    return 0


def _one_partition(args: argparse.Namespace, key: PartitionKey) -> dict[str, Any]:
    if not args.location:
        raise ConfigError("--location is required with --key (or give --file)")
    item: dict[str, Any] = {"key": _key(args.key, key), "location": args.location}
    if args.metadata:
        try:
            item["metadata"] = json.loads(args.metadata)
        except ValueError:
            raise ConfigError("--metadata: not valid JSON") from None
    return item


def _key(pairs: list[str], key: PartitionKey) -> dict[str, Any]:
    """``["date=2026-11-01", "shop=b"]`` as the dataset's typed key."""
    if not pairs:
        raise ConfigError(f"give --key FIELD=VALUE for each of {', '.join(key.names)} "
                          "(or --file)")
    typed: dict[str, Any] = {}
    for pair in pairs:
        field_name, equals, text = pair.partition("=")
        declared = key.field(field_name.strip())
        if not equals or declared is None:
            raise ConfigError(f"--key {pair!r}: expected FIELD=VALUE with FIELD one of "
                              f"{', '.join(key.names)}")
        try:
            typed[declared.name] = declared.to_json(declared.from_text(text))
        except KeyValueError as exc:
            raise ConfigError(f"--key {pair!r}: {declared.type}: {exc}") from None
    missing = [name for name in key.names if name not in typed]
    if missing:
        raise ConfigError(f"--key: missing {', '.join(missing)}")
    return typed


def _file_items(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        document = json.loads(text)
    except OSError as exc:
        raise ConfigError(f"--file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"--file {path}: not valid JSON: {exc}") from None
    if isinstance(document, dict) and isinstance(document.get("partitions"), list):
        document = document["partitions"]
    items = document if isinstance(document, list) else [document]
    if not items or not all(isinstance(item, dict) for item in items):
        raise ConfigError(f"--file {path}: expected a JSON object or a list of objects")
    return items


def datasets_view(datasets: list[dict[str, Any]]) -> str:
    rows = [("DATASET", "KEY", "DESCRIPTION")]
    for dataset in datasets:
        key = ", ".join(f"{item['name']}: {item['type']}" for item in dataset["key"])
        rows.append((f"{dataset['namespace']}/{dataset['name']}", key,
                     (dataset.get("description") or "")[:60]))
    return table(rows) if datasets else "(no datasets)"


def partitions_view(partitions: list[dict[str, Any]]) -> str:
    rows = [("ID", "KEY", "LOCATION", "CREATED", "BY")]
    for item in partitions:
        key = ", ".join(f"{name}={value}" for name, value in item["key"].items())
        by = f"job {item['job_id']} {item['step']}" if item.get("job_id") else "-"
        rows.append((str(item["id"]), key, item["location"][:60], item["created_at"] or "",
                     by))
    return table(rows) if partitions else "(no partitions)"


def consumers_view(consumers: list[dict[str, Any]]) -> str:
    rows = [("CONSUMER", "LAG", "NEW", "IN_PROGRESS", "FAILED", "PROCESSED")]
    for item in consumers:
        counts = item["working_set"]
        rows.append((item["name"], str(item["lag"]), str(counts.get("NEW", 0)),
                     str(counts.get("IN_PROGRESS", 0)), str(counts.get("FAILED", 0)),
                     str(item["processed_total"])))
    return table(rows) if consumers else "(no consumers)"


class DatasetResource(PutResource):
    """A ``kind: Dataset`` document: a dataset's ``name``, ``namespace``,
    ``description`` and ``key``. Deleting a dataset deletes its partitions."""

    collection, noun = "datasets", "dataset"


class ConsumerResource(PutResource):
    """A ``kind: Consumer`` document: ``dataset`` (in ``namespace``) and ``name``
    with the consumer's settings; PUT to ``…/datasets/<ns>/<dataset>/consumers/<name>``.
    Deleting a consumer deletes its working set and pointer."""

    noun = "consumer"

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document)
        dataset = checked_name(self.body, "dataset")
        self.collection = f"datasets/{self.namespace}/{dataset}/consumers"
        self.label = f"consumer {self.namespace}/{dataset}/{self.name}"

    def apply(self, client: Client, dry_run: bool) -> Outcome:
        if self.deleted:
            return self._delete(client, dry_run)
        reply = client.request("PUT", self._path(), self.body, query={"dry_run": dry_run})
        return Outcome(reply["change"], tuple(reply["changed"]))

    def _delete(self, client: Client, dry_run: bool) -> Outcome:
        try:
            client.request("GET" if dry_run else "DELETE", self._path())
        except ApiError as exc:
            if exc.status == 404:
                return Outcome(UNCHANGED, absent=True)
            raise
        return Outcome(DELETED)

    def _path(self) -> str:
        return f"/api/v1/{self.collection}/{self.name}"
