"""Peers measured in the same run: procrastinate (PostgreSQL) and Celery (Redis).

Imported only by the benchmark; nothing in jobserver depends on them.
"""
