-- The store's raw SQL, one complete statement per query, read by name
-- (jobserver.store.queries). A name ending in ``.sqlite`` is that query's SQLite
-- text; the others are PostgreSQL's, with pyformat placeholders (``%(name)s``; a
-- literal percent sign is written ``%%``). SQLite texts take ``?`` placeholders or,
-- where SQLAlchemy's ``text()`` runs them, ``:name``. Whole-line comments are
-- dropped when a statement is read: what a comment says never reaches a driver.


-- name: claim
-- One round trip from READY to a running step: move up to %(limit)s jobs to RUNNING
-- on %(node)s, start each one's first runnable step (its lowest-positioned READY step
-- whose dependencies have all succeeded), append the audit rows and return the jobs
-- with their steps, one row per step, the job's columns (in the model's order) beside
-- each step's (in StepRecord's field order). Run on an autocommit connection, it
-- commits as it returns.
--
-- Three kinds of claim share the statement, told apart by %(assigned)s and %(held)s:
-- * neither, any node's claim: READY, unassigned, due, allowed on this node, and only
--   the ids in %(job_ids)s (NULL: any) and only jobs without a lock_key when
--   %(keyless)s; written only while the lease (%(key)s, %(fence)s) is the newest of
--   its key, and the job takes the lease's fence;
-- * %(held)s, the start of jobs this node claimed ahead (``hold``): the ids in
--   %(job_ids)s still READY and held by %(node)s under that same lease, written only
--   while the lease is the newest of its key;
-- * %(assigned)s, leader mode: the READY jobs the leader assigned to %(node)s, which
--   keep the leader's fence.
-- The engine plans every run with its parameters known (plan_cache_mode =
-- force_custom_plan), so the branch not taken and a NULL filter fold away and the
-- candidates are a range scan of ix_jobs_queue in its own order (``node`` and
-- ``waiting_on`` are constant there: jobs waiting for upstreams are never read),
-- limited once in a materialized CTE and locked with SKIP LOCKED
-- so that concurrent claimers never wait on each other.
--
-- Every CTE sees the steps as they were before ``started`` changed them (one
-- snapshot), hence the overrides from ``started`` in the select list.
WITH candidates AS MATERIALIZED (
  SELECT id FROM jobs
  WHERE state = 'READY' AND waiting_on = 0
    AND ((CAST(%(assigned)s AS boolean) AND node = %(node)s)
         OR (CAST(%(held)s AS boolean) AND node = %(node)s
             AND fence = CAST(%(fence)s AS bigint)
             AND id = ANY(CAST(%(job_ids)s AS bigint[])))
         OR (NOT CAST(%(assigned)s AS boolean) AND NOT CAST(%(held)s AS boolean)
             AND node IS NULL
             AND (not_before IS NULL OR not_before <= clock_timestamp())
             AND (assigned_servers IS NULL OR assigned_servers LIKE %(pattern)s ESCAPE '\')
             AND (CAST(%(job_ids)s AS bigint[]) IS NULL
                  OR id = ANY(CAST(%(job_ids)s AS bigint[])))
             AND (NOT CAST(%(keyless)s AS boolean) OR lock_key IS NULL)))
  ORDER BY node, waiting_on, priority DESC, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), claimed AS (
  UPDATE jobs SET state = 'RUNNING', node = %(node)s,
         fence = COALESCE(CAST(%(fence)s AS bigint), jobs.fence),
         attempt = jobs.attempt + 1, error = NULL, started_at = clock_timestamp(),
         finished_at = NULL, updated_at = clock_timestamp()
  WHERE jobs.id IN (SELECT id FROM candidates) AND jobs.state = 'READY'
    AND ((CAST(%(assigned)s AS boolean) AND jobs.node = %(node)s)
         OR (NOT CAST(%(assigned)s AS boolean)
             AND (NOT CAST(%(held)s AS boolean) OR jobs.node = %(node)s)
             AND EXISTS (
               SELECT 1 FROM lock_epochs
               WHERE key = %(key)s AND epoch = CAST(%(fence)s AS bigint))))
  RETURNING jobs.*
), first AS (
  SELECT step.id FROM claimed CROSS JOIN LATERAL (
    SELECT s.id FROM steps AS s
    WHERE s.job_id = claimed.id AND s.state = 'READY' AND NOT EXISTS (
      SELECT 1 FROM json_array_elements_text(s.depends_on) AS dependency(name)
      WHERE NOT EXISTS (SELECT 1 FROM steps AS done WHERE done.job_id = s.job_id
                        AND done.name = dependency.name AND done.state = 'SUCCEED'))
    ORDER BY s.position LIMIT 1) AS step
), started AS (
  UPDATE steps SET state = 'RUNNING', attempt = steps.attempt + 1,
         started_at = clock_timestamp(), finished_at = NULL, exit_code = NULL, error = NULL,
         output = NULL, wall_seconds = NULL, cpu_seconds = NULL, peak_rss_kb = NULL,
         metrics = NULL
  WHERE steps.id IN (SELECT id FROM first) AND steps.state = 'READY'
  RETURNING steps.id, steps.job_id, steps.name, steps.attempt, steps.started_at
), audit AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at)
  SELECT id, NULL, 'READY', 'RUNNING', node, fence, attempt, NULL, clock_timestamp()
  FROM claimed
  UNION ALL
  SELECT started.job_id, started.name, 'READY', 'RUNNING', claimed.node, claimed.fence,
         started.attempt, NULL, clock_timestamp()
  FROM started JOIN claimed ON claimed.id = started.job_id
)
SELECT claimed.id, claimed.name, claimed.state, claimed.priority, claimed.lock_key,
  claimed.assigned_servers, claimed.params, claimed.parallelism, claimed.not_before,
  claimed.idempotency_key, claimed.request_hash, claimed.node, claimed.fence,
  claimed.attempt, claimed.error, claimed.created_at, claimed.updated_at,
  claimed.started_at, claimed.finished_at, claimed.inputs, claimed.waiting_on,
  claimed.has_dependents, claimed.submitted_by, claimed.submitted_by_token_id,
  s.id, s.job_id, s.position, s.name, s.type, s.spec, s.depends_on, s.retries,
  s.retry_backoff, s.retryable,
  CASE WHEN started.id IS NULL THEN s.state ELSE 'RUNNING' END,
  COALESCE(started.attempt, s.attempt), COALESCE(started.started_at, s.started_at),
  CASE WHEN started.id IS NULL THEN s.finished_at END,
  CASE WHEN started.id IS NULL THEN s.exit_code END,
  CASE WHEN started.id IS NULL THEN s.output END,
  CASE WHEN started.id IS NULL THEN s.error END,
  CASE WHEN started.id IS NULL THEN s.wall_seconds END,
  CASE WHEN started.id IS NULL THEN s.cpu_seconds END,
  CASE WHEN started.id IS NULL THEN s.peak_rss_kb END,
  CASE WHEN started.id IS NULL THEN s.metrics END
FROM claimed LEFT JOIN steps AS s ON s.job_id = claimed.id
LEFT JOIN started ON started.id = s.id
ORDER BY claimed.priority DESC, claimed.id, s.position;


-- name: hold
-- Claim ahead (``scheduler.prefetch``): give up to %(limit)s READY jobs that %(node)s
-- could claim (as the claim's first kind picks them, in its order) to %(node)s under
-- the lease (%(key)s, %(fence)s), without starting them: they stay READY, with the
-- node and the lease's fence set, so no other claim takes them, and nothing about them
-- reads as started. Written only while the lease is the newest of its key; no audit
-- row (no state changes). Returns the held ids in claim order.
WITH candidates AS MATERIALIZED (
  SELECT id FROM jobs
  WHERE state = 'READY' AND waiting_on = 0 AND node IS NULL
    AND (not_before IS NULL OR not_before <= clock_timestamp())
    AND (assigned_servers IS NULL OR assigned_servers LIKE %(pattern)s ESCAPE '\')
    AND (NOT CAST(%(keyless)s AS boolean) OR lock_key IS NULL)
  ORDER BY node, waiting_on, priority DESC, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), held AS (
  UPDATE jobs SET node = %(node)s, fence = CAST(%(fence)s AS bigint),
         updated_at = clock_timestamp()
  WHERE jobs.id IN (SELECT id FROM candidates) AND jobs.state = 'READY'
    AND EXISTS (SELECT 1 FROM lock_epochs
                WHERE key = %(key)s AND epoch = CAST(%(fence)s AS bigint))
  RETURNING jobs.id, jobs.priority
)
SELECT id FROM held ORDER BY priority DESC, id;

-- name: complete
-- The group commit: many step attempts' final writes in one statement, the batch as
-- one JSON document (%(rows)s), each step written only while it is RUNNING and its
-- job carries the writer's claim token, and the job (where ``job_state`` is set) only
-- while it is RUNNING under that token. A step with successors to start (%(next)s:
-- the chain's next steps, by batch index; ``has_next``) is written only while its job
-- is RUNNING too, and its successors go READY -> RUNNING in the same statement: a
-- step transition is one write, shared with every other job's in the batch. Returns
-- ('step', i), ('job', i) and ('next', i) for each batch index i whose
-- compare-and-set matched.
--
-- The ``= ANY(ids)`` conditions repeat what the joins say. They are there for the
-- planner, which cannot see how many rows a JSON document holds and may then prefer
-- a sequential scan of steps and jobs; an array it can look up by key.
WITH v AS MATERIALIZED (
  SELECT * FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
    i int, step_id bigint, step text, job_id bigint, node text, fence bigint,
    attempt int, step_attempt int, state text, exit_code int, output text, error text,
    wall_seconds float8, cpu_seconds float8, peak_rss_kb bigint, metrics json,
    message text, job_state text, job_error text, has_next boolean)
), s AS (
  UPDATE steps SET state = v.state, finished_at = clock_timestamp(),
         exit_code = v.exit_code, output = v.output, error = v.error,
         wall_seconds = v.wall_seconds, cpu_seconds = v.cpu_seconds,
         peak_rss_kb = v.peak_rss_kb, metrics = v.metrics
  FROM v JOIN jobs AS owner ON owner.id = v.job_id AND owner.node = v.node
                           AND owner.fence = v.fence AND owner.attempt = v.attempt
  WHERE steps.id = v.step_id AND steps.state = 'RUNNING'
    AND (NOT v.has_next OR owner.state = 'RUNNING')
    AND steps.id = ANY(%(step_ids)s) AND owner.id = ANY(%(job_ids)s)
  RETURNING v.i
), n AS (
  UPDATE steps SET state = 'RUNNING', attempt = steps.attempt + 1,
         started_at = clock_timestamp(), finished_at = NULL, exit_code = NULL, error = NULL,
         output = NULL, wall_seconds = NULL, cpu_seconds = NULL, peak_rss_kb = NULL,
         metrics = NULL
  FROM json_to_recordset(CAST(%(next)s AS json)) AS x(i int, step_id bigint)
  WHERE x.i IN (SELECT i FROM s) AND steps.id = x.step_id AND steps.state = 'READY'
    AND steps.id = ANY(%(next_ids)s)
  RETURNING x.i, steps.job_id, steps.name, steps.attempt
), j AS (
  UPDATE jobs SET state = v.job_state, error = v.job_error,
         finished_at = clock_timestamp(), updated_at = clock_timestamp()
  FROM v
  WHERE v.job_state IS NOT NULL AND v.i IN (SELECT i FROM s)
    AND jobs.id = v.job_id AND jobs.node = v.node AND jobs.fence = v.fence
    AND jobs.attempt = v.attempt AND jobs.state = 'RUNNING'
    AND jobs.id = ANY(%(job_ids)s)
  RETURNING v.i
), ws AS (
  -- The partitions the finished runs consumed (jobserver.datasets.working_set): DONE
  -- with a SUCCEED; otherwise back to NEW with one more failed attempt, or FAILED
  -- past the consumer's max_retries. Only rows the run holds (IN_PROGRESS under its
  -- job and attempt): a job without inputs finds none through the job_id index.
  UPDATE consumer_partitions AS cp SET
    state = CASE WHEN v.job_state = 'SUCCEED' THEN 'DONE'
                 WHEN cp.attempts + 1 > CAST(c.spec ->> 'max_retries' AS int) THEN 'FAILED'
                 ELSE 'NEW' END,
    attempts = CASE WHEN v.job_state = 'SUCCEED' THEN cp.attempts ELSE cp.attempts + 1 END,
    job_id = CASE WHEN v.job_state = 'SUCCEED' THEN cp.job_id END,
    job_attempt = CASE WHEN v.job_state = 'SUCCEED' THEN cp.job_attempt END,
    lease_expires_at = NULL,
    last_error = CASE WHEN v.job_state = 'SUCCEED' THEN cp.last_error ELSE v.job_error END
  FROM v, consumers AS c
  WHERE v.i IN (SELECT i FROM j) AND c.id = cp.consumer_id
    AND cp.job_id = v.job_id AND cp.job_attempt = v.attempt AND cp.state = 'IN_PROGRESS'
    AND cp.job_id = ANY(%(job_ids)s)
), e AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at)
  SELECT job_id, step, 'RUNNING', state, node, fence, step_attempt, message,
         clock_timestamp() FROM v WHERE i IN (SELECT i FROM s)
  UNION ALL
  SELECT job_id, NULL, 'RUNNING', job_state, node, fence, attempt, job_error,
         clock_timestamp() FROM v WHERE i IN (SELECT i FROM j)
  UNION ALL
  SELECT n.job_id, n.name, 'READY', 'RUNNING', v.node, v.fence, n.attempt, NULL,
         clock_timestamp() FROM n JOIN v ON v.i = n.i
)
SELECT 'step', i FROM s UNION ALL SELECT 'job', i FROM j
UNION ALL SELECT DISTINCT 'next', i FROM n;


-- name: complete_steps.sqlite
-- The group commit's step half on SQLite, which has no data-modifying CTEs and lets
-- RETURNING name only the updated table: each half returns its own ids, still one
-- statement per half, not per job. ? is the batch as a JSON array.
UPDATE steps SET state = v.state,
       finished_at = (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'),
       exit_code = v.exit_code, output = v.output, error = v.error,
       wall_seconds = v.wall_seconds, cpu_seconds = v.cpu_seconds,
       peak_rss_kb = v.peak_rss_kb, metrics = v.metrics
FROM (SELECT json_extract(value, '$.step_id') AS step_id,
             json_extract(value, '$.job_id') AS job_id,
             json_extract(value, '$.node') AS node,
             json_extract(value, '$.fence') AS fence,
             json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.state') AS state,
             json_extract(value, '$.exit_code') AS exit_code,
             json_extract(value, '$.output') AS output,
             json_extract(value, '$.error') AS error,
             json_extract(value, '$.wall_seconds') AS wall_seconds,
             json_extract(value, '$.cpu_seconds') AS cpu_seconds,
             json_extract(value, '$.peak_rss_kb') AS peak_rss_kb,
             json_extract(value, '$.metrics') AS metrics,
             json_extract(value, '$.has_next') AS has_next
      FROM json_each(?)) AS v
JOIN jobs AS owner ON owner.id = v.job_id AND owner.node = v.node
                  AND owner.fence = v.fence AND owner.attempt = v.attempt
WHERE steps.id = v.step_id AND steps.state = 'RUNNING'
  AND (NOT v.has_next OR owner.state = 'RUNNING')
RETURNING steps.id;


-- name: complete_jobs.sqlite
-- The group commit's job half on SQLite: the jobs whose last step was written.
UPDATE jobs SET state = v.job_state, error = v.job_error,
       finished_at = (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'),
       updated_at = (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')
FROM (SELECT json_extract(value, '$.job_id') AS job_id,
             json_extract(value, '$.node') AS node,
             json_extract(value, '$.fence') AS fence,
             json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.job_state') AS job_state,
             json_extract(value, '$.job_error') AS job_error
      FROM json_each(?)) AS v
WHERE jobs.id = v.job_id AND jobs.node = v.node AND jobs.fence = v.fence
  AND jobs.attempt = v.attempt AND jobs.state = 'RUNNING'
RETURNING jobs.id;


-- name: insert_events
-- Audit rows, as many as the JSON array %(rows)s holds, in one statement whose text
-- does not depend on how many there are.
INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                        message, at, actor, actor_token_id)
SELECT v.job_id, v.step, v.from_state, v.to_state, v.node, v.fence, v.attempt,
       v.message, clock_timestamp(), v.actor, v.actor_token_id
FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
  job_id bigint, step text, from_state text, to_state text, node text, fence bigint,
  attempt int, message text, actor text, actor_token_id bigint);


-- name: insert_events.sqlite
INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                        message, at, actor, actor_token_id)
SELECT json_extract(value, '$.job_id'), json_extract(value, '$.step'),
       json_extract(value, '$.from_state'), json_extract(value, '$.to_state'),
       json_extract(value, '$.node'), json_extract(value, '$.fence'),
       json_extract(value, '$.attempt'), json_extract(value, '$.message'),
       (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'),
       json_extract(value, '$.actor'), json_extract(value, '$.actor_token_id')
FROM json_each(?);


-- name: steps_of.sqlite
-- Every step row of the jobs in :ids (a JSON array), by job then position: the steps
-- of a claim's jobs. The PostgreSQL claim returns them itself.
SELECT id, job_id, position, name, type, spec, depends_on, retries, retry_backoff,
       retryable, state, attempt, started_at, finished_at, exit_code, output, error,
       wall_seconds, cpu_seconds, peak_rss_kb, metrics
FROM steps WHERE job_id IN (SELECT value FROM json_each(:ids))
ORDER BY job_id, position;


-- name: start_steps.sqlite
-- READY -> RUNNING for the steps in :ids (a JSON array): a claim's first steps.
UPDATE steps SET state = 'RUNNING', attempt = attempt + 1,
       started_at = (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'),
       finished_at = NULL, exit_code = NULL, error = NULL, output = NULL,
       wall_seconds = NULL, cpu_seconds = NULL, peak_rss_kb = NULL, metrics = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'READY'
RETURNING id, attempt, started_at;


-- name: submit
-- One job with its steps (%(steps)s, a JSON array), its first audit row and, when
-- %(channel)s is not NULL, the notification that wakes idle schedulers, on an
-- autocommit connection: the job is committed, and the schedulers woken, as the
-- statement returns. Returns the job's columns (in the model's order) and its steps
-- as a JSON array. pg_notify runs once, for the one row; the notification is
-- delivered when the statement commits.
WITH job AS (
  INSERT INTO jobs (name, state, priority, lock_key, assigned_servers, params, parallelism,
                    not_before, idempotency_key, request_hash, fence, attempt, created_at,
                    updated_at, inputs, submitted_by, submitted_by_token_id)
  VALUES (%(name)s, 'READY', %(priority)s, %(lock_key)s, %(assigned_servers)s,
          CAST(%(params)s AS json), %(parallelism)s, %(not_before)s, %(idempotency_key)s,
          %(request_hash)s, 0, 0, clock_timestamp(), clock_timestamp(),
          CAST(%(inputs)s AS json), %(submitted_by)s, %(submitted_by_token_id)s)
  RETURNING *
), step AS (
  INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries,
                     retry_backoff, retryable, state, attempt)
  SELECT job.id, v.position, v.name, v.type, v.spec, v.depends_on, v.retries,
         v.retry_backoff, v.retryable, 'READY', 0
  FROM job, json_to_recordset(CAST(%(steps)s AS json)) AS v(
    position int, name text, type text, spec json, depends_on json, retries int,
    retry_backoff float8, retryable boolean)
  RETURNING *
), audit AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at, actor, actor_token_id)
  SELECT id, NULL, NULL, 'READY', NULL, NULL, NULL, 'submitted', clock_timestamp(),
         submitted_by, submitted_by_token_id FROM job
)
SELECT job.id, job.name, job.state, job.priority, job.lock_key, job.assigned_servers,
  job.params, job.parallelism, job.not_before, job.idempotency_key, job.request_hash,
  job.node, job.fence, job.attempt, job.error, job.created_at, job.updated_at,
  job.started_at, job.finished_at, job.inputs, job.waiting_on, job.has_dependents,
  job.submitted_by, job.submitted_by_token_id,
  (SELECT json_agg(step ORDER BY step.position) FROM step) AS step_rows,
  CASE WHEN CAST(%(channel)s AS text) IS NOT NULL
       THEN pg_notify(%(channel)s, '') IS NULL END AS woken
FROM job;


-- name: final_events
-- The feed of final job events (jobserver.store.feed) after the cursor
-- (%(txid)s, %(position)s), in commit order: only rows written by transactions older
-- than %(horizon)s (feed_horizon, read just before), which have all ended, so that no
-- row can later appear before the cursor. The first three conditions are the partial
-- index ix_job_events_finals's own predicate, spelled the same so that it is used.
SELECT e.id, e.txid, e.job_id, j.name, j.idempotency_key, e.to_state, e.at
FROM job_events AS e JOIN jobs AS j ON j.id = e.job_id
WHERE e.txid IS NOT NULL AND e.step IS NULL
  AND e.to_state IN ('SUCCEED', 'ERROR', 'DISCARDED', 'STOPPED')
  AND (e.txid, e.id) > (CAST(%(txid)s AS bigint), CAST(%(position)s AS bigint))
  AND e.txid < CAST(%(horizon)s AS bigint)
ORDER BY e.txid, e.id
LIMIT %(limit)s;


-- name: final_events.sqlite
-- SQLite serialises writers, so ids are handed out in commit order.
SELECT e.id, 0, e.job_id, j.name, j.idempotency_key, e.to_state, e.at
FROM job_events AS e JOIN jobs AS j ON j.id = e.job_id
WHERE e.id > :position AND e.step IS NULL
  AND e.to_state IN ('SUCCEED', 'ERROR', 'DISCARDED', 'STOPPED')
ORDER BY e.id
LIMIT :limit;


-- name: feed_horizon
-- The horizon: the oldest transaction of this database still running, as this
-- statement's snapshot sees it (every older one has ended), or the snapshot's xmax
-- when none runs. Transaction ids are cluster-wide: one that pg_stat_activity shows
-- running in another database is left out, so that a long transaction elsewhere
-- does not hold this feed back. One that ended between the snapshot and that read
-- is kept in (it cannot be placed), which only makes the horizon earlier: a row is
-- read late, never skipped. Every transaction below it had ended when this
-- statement began, so a later statement sees all of their rows. Also where a new
-- reader starts: rows of transactions at or after the horizon are still to come.
SELECT COALESCE(
  (SELECT MIN(CAST(CAST(x AS text) AS bigint))
   FROM pg_snapshot_xip(pg_current_snapshot()) AS x
   WHERE xid(x) NOT IN (SELECT backend_xid FROM pg_stat_activity
                        WHERE backend_xid IS NOT NULL AND datname <> current_database())),
  CAST(CAST(pg_snapshot_xmax(pg_current_snapshot()) AS text) AS bigint));


-- name: feed_head.sqlite
SELECT 0, COALESCE(MAX(id), 0) FROM job_events;


-- name: partitions_add
-- A batch of partitions of one dataset (%(rows)s: a JSON array of their key columns,
-- location, metadata and producer) in one statement whose text does not depend on
-- how many, if the dataset %(dataset_id)s still has the key %(key)s they were checked
-- against; the dataset's row is held in share mode until the transaction ends, so
-- neither its key nor its existence changes meanwhile. A key already there adds
-- nothing. Returns whether the dataset matched, then one row per partition added
-- (none: one row of NULLs). txid is the column's default: this transaction's id.
WITH d AS (
  SELECT id FROM datasets
  WHERE id = %(dataset_id)s AND CAST(key AS jsonb) = CAST(%(key)s AS jsonb)
  FOR SHARE
), added AS (
  INSERT INTO partitions (dataset_id, k0, k1, k2, k3, k4, k5, k6, k7, location, meta,
                          created_at, job_id, step)
  SELECT d.id, v.k0, v.k1, v.k2, v.k3, v.k4, v.k5, v.k6, v.k7, v.location, v.meta,
         statement_timestamp(), v.job_id, v.step
  FROM d, ROWS FROM (json_to_recordset(CAST(%(rows)s AS json)) AS (
    k0 text, k1 text, k2 text, k3 text, k4 text, k5 text, k6 text, k7 text,
    location text, meta json, job_id bigint, step text)) WITH ORDINALITY AS v(
    k0, k1, k2, k3, k4, k5, k6, k7, location, meta, job_id, step, ordinality)
  ORDER BY v.ordinality
  ON CONFLICT (dataset_id, k0, k1, k2, k3, k4, k5, k6, k7) DO NOTHING
  RETURNING id
)
SELECT (SELECT count(*) FROM d), added.id
FROM (SELECT 1) AS one LEFT JOIN added ON true;


-- name: partitions_add.sqlite
-- The same for SQLite, whose writers are serialised: the caller has read the
-- dataset's key in this transaction. Returns the ids added.
INSERT INTO partitions (dataset_id, k0, k1, k2, k3, k4, k5, k6, k7, location, meta,
                        created_at, job_id, step)
SELECT :dataset_id, json_extract(value, '$.k0'), json_extract(value, '$.k1'),
       json_extract(value, '$.k2'), json_extract(value, '$.k3'),
       json_extract(value, '$.k4'), json_extract(value, '$.k5'),
       json_extract(value, '$.k6'), json_extract(value, '$.k7'),
       json_extract(value, '$.location'), json(json_extract(value, '$.meta')),
       (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'), json_extract(value, '$.job_id'),
       json_extract(value, '$.step')
FROM json_each(:rows) WHERE true ORDER BY key
ON CONFLICT DO NOTHING
RETURNING id;


-- name: partitions_existing
-- Of the keys in %(rows)s (a JSON array of key columns), those the dataset holds:
-- which of a batch were there already. The unique key index finds each.
SELECT p.id, p.k0, p.k1, p.k2, p.k3, p.k4, p.k5, p.k6, p.k7, p.job_id, p.step
FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
  k0 text, k1 text, k2 text, k3 text, k4 text, k5 text, k6 text, k7 text)
JOIN partitions AS p ON p.dataset_id = %(dataset_id)s
  AND (p.k0, p.k1, p.k2, p.k3, p.k4, p.k5, p.k6, p.k7)
    = (v.k0, v.k1, v.k2, v.k3, v.k4, v.k5, v.k6, v.k7);


-- name: partitions_existing.sqlite
SELECT p.id, p.k0, p.k1, p.k2, p.k3, p.k4, p.k5, p.k6, p.k7, p.job_id, p.step
FROM json_each(:rows) AS v
JOIN partitions AS p ON p.dataset_id = :dataset_id
  AND p.k0 = json_extract(v.value, '$.k0') AND p.k1 = json_extract(v.value, '$.k1')
  AND p.k2 = json_extract(v.value, '$.k2') AND p.k3 = json_extract(v.value, '$.k3')
  AND p.k4 = json_extract(v.value, '$.k4') AND p.k5 = json_extract(v.value, '$.k5')
  AND p.k6 = json_extract(v.value, '$.k6') AND p.k7 = json_extract(v.value, '$.k7');


-- name: submit_keyed
-- Many jobs, each under its own idempotency key, in one statement on an autocommit
-- connection (%(jobs)s: a JSON array of the jobs' columns, each with its steps as a
-- JSON array): the jobs, their steps, their first audit rows and one wake-up of idle
-- schedulers (when %(channel)s is not NULL). A key that exists already creates
-- nothing; the statement returns (id, idempotency_key) of the jobs it created, and
-- the caller looks the others up.
--
-- A job that waits for upstreams (``after``, a JSON array of {job, when}) comes with
-- its count of those not yet met (``waiting_on``), which the caller read while
-- locking the upstream rows in the same transaction (see store/dependencies.py);
-- its job_dependencies rows are inserted here too.
WITH v AS (
  SELECT * FROM json_to_recordset(CAST(%(jobs)s AS json)) AS v(
    name text, priority int, lock_key text, assigned_servers text, params json,
    parallelism int, not_before timestamptz, idempotency_key text, request_hash text,
    steps json, inputs json, waiting_on int, after json, submitted_by text,
    submitted_by_token_id bigint)
), job AS (
  INSERT INTO jobs (name, state, priority, lock_key, assigned_servers, params, parallelism,
                    not_before, idempotency_key, request_hash, fence, attempt, created_at,
                    updated_at, inputs, waiting_on, submitted_by, submitted_by_token_id)
  SELECT name, 'READY', priority, lock_key, assigned_servers, params, parallelism,
         not_before, idempotency_key, request_hash, 0, 0, clock_timestamp(),
         clock_timestamp(), inputs, COALESCE(waiting_on, 0), submitted_by,
         submitted_by_token_id
  FROM v
  ON CONFLICT (idempotency_key) DO NOTHING
  RETURNING id, idempotency_key, submitted_by, submitted_by_token_id
), link AS (
  INSERT INTO job_dependencies (job_id, upstream_id, awaits)
  SELECT job.id, a.job, a."when"
  FROM job JOIN v ON v.idempotency_key = job.idempotency_key
  CROSS JOIN LATERAL json_to_recordset(COALESCE(v.after, CAST('[]' AS json)))
    AS a(job bigint, "when" text)
), step AS (
  INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries,
                     retry_backoff, retryable, state, attempt)
  SELECT job.id, s.position, s.name, s.type, s.spec, s.depends_on, s.retries,
         s.retry_backoff, s.retryable, 'READY', 0
  FROM job JOIN v ON v.idempotency_key = job.idempotency_key
  CROSS JOIN LATERAL json_to_recordset(v.steps) AS s(
    position int, name text, type text, spec json, depends_on json, retries int,
    retry_backoff float8, retryable boolean)
), audit AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at, actor, actor_token_id)
  SELECT id, NULL, NULL, 'READY', NULL, NULL, NULL, 'submitted', clock_timestamp(),
         submitted_by, submitted_by_token_id FROM job
), wake AS (
  SELECT pg_notify(%(channel)s, '') FROM job
  WHERE CAST(%(channel)s AS text) IS NOT NULL LIMIT 1
)
SELECT job.id, job.idempotency_key, (SELECT count(*) FROM wake) FROM job;


-- name: submit_batch
-- A batch of jobs from the API (POST /api/v1/jobs/batch) in one statement on an
-- autocommit connection, all or nothing. %(jobs)s: a JSON array of the jobs' columns,
-- each with its position in the request (ord) and its steps as a JSON array; an item
-- with an idempotency key already in the store is a replay if its request_hash is the
-- stored one and a conflict otherwise. With any conflict nothing is inserted: the
-- statement returns the items found under their keys (conflict true for the
-- different requests) and the caller refuses the batch. Otherwise it inserts the rest
-- with their steps, first audit rows and one wake-up of idle schedulers (when
-- %(channel)s is not NULL), and returns (ord, id, created, conflict) of every item.
--
-- The new ids are drawn in request order before the INSERT, so that they ascend as
-- the items do (a scheduler takes jobs of equal priority by id) and map back to
-- their items whether or not they carry a key. Every row of ``new`` is inserted (or
-- the statement fails), so the steps are read from ``new`` itself: joined with the
-- INSERT's RETURNING, whose size the planner cannot see, they were matched by a
-- nested loop, n squared comparisons for n jobs. Two batches racing for one new key
-- meet on its unique index: the loser's statement fails whole, and the caller runs
-- it again, finding the winner's job.
WITH v AS (
  SELECT * FROM json_to_recordset(CAST(%(jobs)s AS json)) AS v(
    ord int, name text, priority int, lock_key text, assigned_servers text, params json,
    parallelism int, not_before timestamptz, idempotency_key text, request_hash text,
    steps json, inputs json, submitted_by text, submitted_by_token_id bigint)
), old AS (
  SELECT v.ord, j.id, j.request_hash IS DISTINCT FROM v.request_hash AS conflict
  FROM v JOIN jobs AS j ON j.idempotency_key = v.idempotency_key
), seq AS (
  SELECT CAST(pg_get_serial_sequence('jobs', 'id') AS regclass) AS name
), new AS MATERIALIZED (
  SELECT nextval((SELECT name FROM seq)) AS id, o.*
  FROM (SELECT v.* FROM v
        WHERE NOT EXISTS (SELECT 1 FROM old WHERE old.ord = v.ord)
          AND NOT EXISTS (SELECT 1 FROM old WHERE old.conflict)
        ORDER BY v.ord) AS o
), job AS (
  INSERT INTO jobs (id, name, state, priority, lock_key, assigned_servers, params,
                    parallelism, not_before, idempotency_key, request_hash, fence, attempt,
                    created_at, updated_at, inputs, submitted_by, submitted_by_token_id)
  SELECT id, name, 'READY', priority, lock_key, assigned_servers, params, parallelism,
         not_before, idempotency_key, request_hash, 0, 0, clock_timestamp(),
         clock_timestamp(), inputs, submitted_by, submitted_by_token_id
  FROM new
  RETURNING id, submitted_by, submitted_by_token_id
), step AS (
  INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries,
                     retry_backoff, retryable, state, attempt)
  SELECT new.id, s.position, s.name, s.type, s.spec, s.depends_on, s.retries,
         s.retry_backoff, s.retryable, 'READY', 0
  FROM new
  CROSS JOIN LATERAL json_to_recordset(new.steps) AS s(
    position int, name text, type text, spec json, depends_on json, retries int,
    retry_backoff float8, retryable boolean)
), audit AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at, actor, actor_token_id)
  SELECT id, NULL, NULL, 'READY', NULL, NULL, NULL, 'submitted', clock_timestamp(),
         submitted_by, submitted_by_token_id FROM job
), wake AS (
  SELECT pg_notify(%(channel)s, '') FROM job
  WHERE CAST(%(channel)s AS text) IS NOT NULL LIMIT 1
)
SELECT ord, id, TRUE, FALSE, (SELECT count(*) FROM wake) FROM new
UNION ALL
SELECT ord, id, FALSE, conflict, 0 FROM old;


-- name: submit_batch_jobs.sqlite
-- The new jobs of a batch (:rows, a JSON array of their columns, not_before as the
-- stored text) in the caller's write transaction, in array order. SQLite gives each
-- row the next rowid, so under the transaction's write lock the ids ascend in that
-- order; the caller sorts the ids returned (RETURNING's order is unspecified).
INSERT INTO jobs (name, state, priority, lock_key, assigned_servers, params, parallelism,
                  not_before, idempotency_key, request_hash, fence, attempt, created_at,
                  updated_at, inputs, submitted_by, submitted_by_token_id)
SELECT json_extract(value, '$.name'), 'READY', json_extract(value, '$.priority'),
       json_extract(value, '$.lock_key'), json_extract(value, '$.assigned_servers'),
       json_extract(value, '$.params'), json_extract(value, '$.parallelism'),
       json_extract(value, '$.not_before'), json_extract(value, '$.idempotency_key'),
       json_extract(value, '$.request_hash'), 0, 0,
       (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'),
       (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'), json_extract(value, '$.inputs'),
       json_extract(value, '$.submitted_by'), json_extract(value, '$.submitted_by_token_id')
FROM json_each(:rows) ORDER BY key
RETURNING id;


-- name: submit_batch_steps.sqlite
-- The steps of a batch's new jobs (:rows, a JSON array of step rows with their job_id).
INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries, retry_backoff,
                   retryable, state, attempt)
SELECT json_extract(value, '$.job_id'), json_extract(value, '$.position'),
       json_extract(value, '$.name'), json_extract(value, '$.type'),
       json_extract(value, '$.spec'), json_extract(value, '$.depends_on'),
       json_extract(value, '$.retries'), json_extract(value, '$.retry_backoff'),
       json_extract(value, '$.retryable'), 'READY', 0
FROM json_each(:rows);


-- name: schedule_evaluations_insert
-- The schedule evaluator's records, as many as the JSON array %(rows)s holds, in one
-- statement whose text does not depend on how many (jobserver.store.bulk says why
-- not executemany).
INSERT INTO schedule_evaluations (schedule_id, schedule_job_id, at, outcome, fire_time,
                                  reason, details, next_check_at)
SELECT v.schedule_id, v.schedule_job_id, v.at, v.outcome, v.fire_time, v.reason,
       v.details, v.next_check_at
FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
  schedule_id bigint, schedule_job_id bigint, at timestamptz, outcome text,
  fire_time timestamptz, reason text, details json, next_check_at timestamptz);


-- name: schedules_save
-- Each evaluated schedule's trigger state and next check time.
UPDATE schedules AS s SET trigger_state = v.trigger_state, next_check_at = v.next_check_at
FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
  id bigint, trigger_state json, next_check_at timestamptz)
WHERE s.id = v.id;


-- name: schedule_jobs_insert
-- New schedule-jobs; returns their ids. The sequence hands ids out in the order the
-- rows are inserted, which is the array's (ORDER BY ordinality), so the caller pairs
-- the ids, sorted, with its rows.
INSERT INTO schedule_jobs (schedule_id, generation, state, fire_time, notifications,
                           trigger_state, properties, created_at, updated_at,
                           deadline_at, next_check_at, launch_key, reason, job_id)
SELECT v.schedule_id, v.generation, v.state, v.fire_time, v.notifications,
       v.trigger_state, v.properties, v.created_at, v.updated_at, v.deadline_at,
       v.next_check_at, v.launch_key, v.reason, v.job_id
FROM ROWS FROM (json_to_recordset(CAST(%(rows)s AS json)) AS (
  schedule_id bigint, generation int, state text, fire_time timestamptz,
  notifications json, trigger_state json, properties json, created_at timestamptz,
  updated_at timestamptz, deadline_at timestamptz, next_check_at timestamptz,
  launch_key text, reason text, job_id bigint)) WITH ORDINALITY AS v(
  schedule_id, generation, state, fire_time, notifications, trigger_state, properties,
  created_at, updated_at, deadline_at, next_check_at, launch_key, reason, job_id,
  ordinality)
ORDER BY v.ordinality
RETURNING id;


-- name: schedule_jobs_update
-- Schedule-jobs changed by an evaluation, if still pending (the API may have aborted
-- one since it was read).
UPDATE schedule_jobs AS j SET state = v.state, fire_time = v.fire_time,
  notifications = v.notifications, trigger_state = v.trigger_state,
  properties = v.properties, updated_at = v.updated_at, deadline_at = v.deadline_at,
  next_check_at = v.next_check_at, launch_key = v.launch_key, reason = v.reason,
  job_id = v.job_id
FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
  id bigint, state text, fire_time timestamptz, notifications json, trigger_state json,
  properties json, updated_at timestamptz, deadline_at timestamptz,
  next_check_at timestamptz, launch_key text, reason text, job_id bigint)
WHERE j.id = v.id AND j.state IN ('PENDING_TRIGGER', 'PENDING_CONSTRAINTS');


-- name: schedule_jobs_launched
-- PENDING_LAUNCH -> LAUNCHED with the ids of their jobs; returns the ids moved (one
-- aborted meanwhile stays ABORTED).
UPDATE schedule_jobs AS j SET state = 'LAUNCHED', job_id = v.job_id, reason = NULL,
  updated_at = CAST(%(now)s AS timestamptz)
FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(id bigint, job_id bigint)
WHERE j.id = v.id AND j.state = 'PENDING_LAUNCH'
RETURNING j.id;


-- name: view_events_insert
-- Scheduling events of view partitions, %(rows)s one JSON array of them (see
-- store/bulk.py: one statement, not a pipeline of one per row). ``txid`` takes its
-- column default: the writing transaction, for the ordered feed.
INSERT INTO view_events (view, key, "values", previous, "new", job_id, message, at)
SELECT r.view, r.key, r."values", r.previous, r."new", r.job_id, r.message, r.at
FROM json_to_recordset(CAST(%(rows)s AS json)) AS r(
  view text, key text, "values" json, previous text, "new" text, job_id bigint,
  message text, at timestamptz);


-- name: view_partitions_set_jobs
-- The jobs just submitted for view partitions this transaction holds already,
-- %(rows)s one JSON array of {view, key, job_id}.
UPDATE view_partitions AS p SET job_id = r.job_id
FROM json_to_recordset(CAST(%(rows)s AS json)) AS r(view text, key text, job_id bigint)
WHERE p.view = r.view AND p.key = r.key;
