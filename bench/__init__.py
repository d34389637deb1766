"""The benchmark harness (``make bench``); see bench/run.py and bench/RESULTS.md."""
