"""How the leader spreads READY jobs over live nodes."""

from __future__ import annotations

from schedulers.leader import plan_assignments


def test_most_free_node_first_and_capacity_respected() -> None:
    plan = plan_assignments([(1, None), (2, None), (3, None), (4, None)],
                            {"a": 1, "b": 2, "c": 0})
    assert plan == {"b": [1, 3], "a": [2]}  # job 4 waits: no free slot anywhere


def test_assigned_servers_are_honoured() -> None:
    plan = plan_assignments([(1, ["c"]), (2, ["a", "c"]), (3, ["zzz"])], {"a": 5, "c": 1})
    assert plan == {"c": [1], "a": [2]}


def test_ties_are_stable() -> None:
    assert plan_assignments([(1, None)], {"b": 3, "a": 3}) == {"a": [1]}
