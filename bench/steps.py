"""The benchmark's python step (entry point ``bench.stamp``).

Its first instruction stamps the wall clock; the stamp comes back as the step's
metrics (``{"t": ...}``), so submit-to-start latency is measured to the step body
itself, not to the claim. ``sleep`` keeps the job busy afterwards (failover, footprint).
"""

import time


def stamp(ctx, sleep: float = 0.0, **_args):
    started = time.time()
    if sleep:
        ctx.cancelled.wait(sleep)
    return {"t": started}
