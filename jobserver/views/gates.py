"""Gates: what a view job's dependents wait for, so that they start only once the
partition they read is settled (materialized, or failed after its retries).

Schedoscope's view in ``retrying`` is not yet ``failed``: its dependents wait until
its retries are used up or one of them succeeds. A dependent's job cannot wait for
its upstream's job itself: the engine's ``after`` releases a ``done`` dependent in the
very statement that ends the upstream ERROR (its trigger, see
:mod:`jobserver.store.triggers`), before the tracker has read that end, so the
dependent is claimed at once and runs on missing data while the retry runs. Pointing
the dependent at the retry job afterwards comes too late for the same reason, and a
``succeeded`` link would fail the dependent with its upstream.

So a partition whose job others wait for gets a *gate*: a job of one ``noop`` step,
named ``view gate <partition>``, held READY by a ``not_before`` no clock reaches
(:data:`HELD_UNTIL`), that no scheduler ever claims. Dependents wait for the gate
(``when: "done"``); the tracker discards it (:func:`~jobserver.store.jobs.discard_waiting`)
in the transaction that makes the partition MATERIALIZED or FAILED, which releases
them. A retry changes nothing about the gate: gates belong to the partition, not to
one of its jobs, and are found by their name.

Invariants, each held by the partition row's compare-and-set:

* a partition has a live gate only while it is in flight: a gate is made in the
  transaction that moves the partition to WAITING, or under the row lock a joining
  request takes (:class:`~jobserver.views.store.Change` with ``bump=False``); every
  write that takes it out of flight (the tracker's MATERIALIZED or FAILED, a
  SET_ONLY, a deleted definition) discards its live gates in the same transaction;
* so a request that links a dependent to a gate either commits before the tracker
  settles the partition (and the gate is then discarded after the link exists), or
  its compare-and-set fails and it plans again from the settled state.

The cost: one more job for each partition that has dependents in the same request
(or is joined by one), and a dependent starts one tracker round
(``views.poll_interval``) after its upstream succeeds rather than at once. A gate an
operator discards lets its dependents go; gates wait for a tracker, so with
``views.enabled`` false on every node dependents of a transformed partition never
start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from sqlalchemy import Connection, or_, select

from jobserver.spec import JobSpec, Policy, validate_job
from jobserver.states import State
from jobserver.store.jobs import JobRepository, KeyedSubmit, discard_waiting
from jobserver.store.records import Actor
from jobserver.store.tables import jobs
from jobserver.views.model import ViewAddress

#: A gate's ``not_before``: later than any store's clock, so nothing claims it.
HELD_UNTIL = datetime(9999, 1, 1, tzinfo=timezone.utc)
#: The job parameter naming the partition a gate holds back for.
GATE_OF = "gate_of"
#: The view planner's actors: ``views``, and ``views for <requester>``.
_ACTORS = ("views", "views for %")
#: Names per statement (SQLite's bound-parameter limit is 32,766).
_CHUNK = 5000
RELEASED = "the view partition it holds dependents back for is settled"


def gate_name(address: ViewAddress) -> str:
    """``view gate app.eci.stage/Search/SHOP10/2015/05/03``, cut to a job name's 200."""
    name = f"view gate {address.path}"
    return name if len(name) <= 200 else name[:199] + "…"


def gate_key(job_id: int) -> str:
    """The idempotency key of the gate made while ``job_id`` is its partition's job:
    two requests joining that job make one gate."""
    return f"view-gate/{job_id}"


def gate_spec(address: ViewAddress) -> JobSpec:
    return JobSpec.model_validate({
        "name": gate_name(address), "steps": [{"name": "gate", "type": "noop"}],
        "not_before": HELD_UNTIL, "params": {GATE_OF: address.path}})


def live_gates(conn: Connection, addresses: Iterable[ViewAddress]) -> dict[ViewAddress, list[int]]:
    """The gates still held (READY) of each of ``addresses`` that has any."""
    by_name: dict[str, list[ViewAddress]] = {}
    for address in addresses:
        by_name.setdefault(gate_name(address), []).append(address)
    names = list(by_name)
    found: dict[ViewAddress, list[int]] = {}
    for start in range(0, len(names), _CHUNK):
        rows = conn.execute(select(jobs.c.id, jobs.c.name, jobs.c.params).where(
            jobs.c.name.in_(names[start:start + _CHUNK]),
            jobs.c.state == State.READY.value,
            or_(jobs.c.submitted_by == _ACTORS[0], jobs.c.submitted_by.like(_ACTORS[1]))))
        for job_id, name, params in rows:
            # A cut name may be shared: the parameter says whose gate it is.
            for address in by_name[name]:
                if (params or {}).get(GATE_OF) == address.path:
                    found.setdefault(address, []).append(int(job_id))
    return found


def make_gates(repository: JobRepository, conn: Connection, policy: Policy, actor: Actor,
               jobs_of: Mapping[ViewAddress, int], fresh: Iterable[int] = ()) -> dict[int, int]:
    """The gate of each partition in ``jobs_of`` (partition → its job now), made
    where it has none, in the caller's transaction; returns job → gate. ``fresh``
    jobs were made by this transaction: their partitions have no gate yet."""
    made_here = set(fresh)
    known = live_gates(conn, [a for a, job in jobs_of.items() if job not in made_here])
    gates = {job: known[address][0] for address, job in jobs_of.items() if address in known}
    wanted = {address: job for address, job in jobs_of.items() if job not in gates}
    if wanted:
        items = {}
        for address, job in wanted.items():
            spec = gate_spec(address)
            items[job] = KeyedSubmit(spec, validate_job(spec, policy), gate_key(job), None,
                                     actor)
        ids = repository.submit_keyed(list(items.values()), conn=conn)
        gates.update((job, ids[item.key]) for job, item in items.items())
    return gates


def release(conn: Connection, addresses: Iterable[ViewAddress], actor: Actor) -> list[int]:
    """Discard the live gates of ``addresses`` (settled, or no longer in flight) in
    the caller's transaction; returns the gates discarded. The caller wakes the
    schedulers (:meth:`~jobserver.store.Transactions.notify`) when there are any."""
    held = [gate for gates in live_gates(conn, addresses).values() for gate in gates]
    return discard_waiting(conn, sorted(held), RELEASED, actor) if held else []
