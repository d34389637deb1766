"""The trigger that keeps ``jobs.waiting_on`` true: one per dialect, same rule.

``waiting_on`` counts a job's upstream edges (``job_dependencies``) not met by their
upstream's current state: ``done`` is met by SUCCEED, ERROR or DISCARDED,
``succeeded`` by SUCCEED only. It changes only when an upstream crosses into or out of
those states, and a trigger on ``jobs.state`` catches every such write, whichever path
makes it (the group commit on either dialect, an operator's discard, resume or rerun,
a rescue to ERROR, a planner's discard of a waiting launch) in the writer's own
statement and transaction. Its WHEN clause lets only jobs with dependents
(``has_dependents``) crossing a final boundary pay: a claim (READY -> RUNNING) never
fires it.

An upstream ending ERROR or DISCARDED also moves its READY ``succeeded`` dependents
to ERROR ("upstream job 42 ended ERROR") with an audit row; that write fires the same
trigger on them, so the failure cascades down the graph. SQLite needs
``recursive_triggers`` for that (the engine turns it on for every connection); its
depth is bounded by SQLITE_MAX_TRIGGER_DEPTH (1000), PostgreSQL's by the stack.

Migration 0008 creates these; the models create them on ``create_all``.
"""

from __future__ import annotations

FINAL = "('SUCCEED', 'ERROR', 'DISCARDED')"

# 1 when an edge of kind ``e.awaits`` is unmet by the state ``{row}.state``.
_UNMET = ("(CASE WHEN {row}.state = 'SUCCEED' OR (e.awaits = 'done' AND {row}.state "
          "IN ('ERROR', 'DISCARDED')) THEN 0 ELSE 1 END)")
_DELTA = f"({_UNMET.format(row='NEW')} - {_UNMET.format(row='OLD')})"
_WHEN = (f"NEW.has_dependents AND OLD.state <> NEW.state "
         f"AND (OLD.state IN {FINAL} OR NEW.state IN {FINAL})")
_FAILED = "'upstream job ' || NEW.id || ' ended ' || NEW.state"

POSTGRESQL = [
    f"""CREATE FUNCTION jobs_release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE jobs AS d SET waiting_on = d.waiting_on + c.delta
  FROM (SELECT e.job_id, SUM{_DELTA} AS delta FROM job_dependencies AS e
        WHERE e.upstream_id = NEW.id GROUP BY e.job_id) AS c
  WHERE d.id = c.job_id AND c.delta <> 0;
  IF NEW.state IN ('ERROR', 'DISCARDED') THEN
    WITH failed AS (
      UPDATE jobs AS d SET state = 'ERROR', node = NULL, error = {_FAILED},
             finished_at = clock_timestamp(), updated_at = clock_timestamp()
      FROM job_dependencies AS e
      WHERE e.upstream_id = NEW.id AND e.awaits = 'succeeded' AND d.id = e.job_id
        AND d.state = 'READY'
      RETURNING d.id, d.error)
    INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                            message, at)
    SELECT id, NULL, 'READY', 'ERROR', NULL, NULL, NULL, error, clock_timestamp()
    FROM failed;
  END IF;
  RETURN NULL;
END
$$""",
    f"""CREATE TRIGGER jobs_release_dependents AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN ({_WHEN}) EXECUTE FUNCTION jobs_release_dependents()""",
]

POSTGRESQL_DROP = ["DROP TRIGGER IF EXISTS jobs_release_dependents ON jobs",
                   "DROP FUNCTION IF EXISTS jobs_release_dependents()"]

_SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"

SQLITE = [
    f"""CREATE TRIGGER jobs_release_dependents AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN {_WHEN}
BEGIN
  UPDATE jobs SET waiting_on = waiting_on + (
    SELECT SUM{_DELTA} FROM job_dependencies AS e
    WHERE e.upstream_id = NEW.id AND e.job_id = jobs.id)
  WHERE id IN (SELECT job_id FROM job_dependencies WHERE upstream_id = NEW.id);
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at)
  SELECT d.id, NULL, 'READY', 'ERROR', NULL, NULL, NULL, {_FAILED}, {_SQLITE_NOW}
  FROM job_dependencies AS e JOIN jobs AS d ON d.id = e.job_id
  WHERE NEW.state IN ('ERROR', 'DISCARDED') AND e.upstream_id = NEW.id
    AND e.awaits = 'succeeded' AND d.state = 'READY';
  UPDATE jobs SET state = 'ERROR', node = NULL, error = {_FAILED},
         finished_at = {_SQLITE_NOW}, updated_at = {_SQLITE_NOW}
  WHERE NEW.state IN ('ERROR', 'DISCARDED') AND state = 'READY' AND id IN (
    SELECT job_id FROM job_dependencies WHERE upstream_id = NEW.id
    AND awaits = 'succeeded');
END""",
]

SQLITE_DROP = ["DROP TRIGGER IF EXISTS jobs_release_dependents"]


def create(dialect: str) -> list[str]:
    """The statements creating the trigger on ``dialect``."""
    return POSTGRESQL if dialect == "postgresql" else SQLITE


def drop(dialect: str) -> list[str]:
    return POSTGRESQL_DROP if dialect == "postgresql" else SQLITE_DROP
