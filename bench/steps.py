"""The benchmark's python step (entry point ``bench.stamp``).

Its first instruction stamps the wall clock; the stamp comes back as the step's
metrics (``{"t": ...}``), so submit-to-start latency is measured to the step body
itself, not to the claim. ``sleep`` keeps the job busy afterwards (failover, footprint,
shapes); ``out_bytes`` makes the step return that many bytes of result besides the
stamp (``{"t": ..., "out": "ooo..."}``), which the store keeps as the step's metrics.
"""

import time


def stamp(ctx, sleep: float = 0.0, out_bytes: int = 0, **_args):
    started = time.time()
    if sleep:
        ctx.cancelled.wait(sleep)
    if out_bytes:
        return {"t": started, "out": "o" * int(out_bytes)}
    return {"t": started}
