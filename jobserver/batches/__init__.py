"""Batches: control table, stages and job groups chosen by context, catch-ups, watermarks."""
