"""Views (Schedoscope): goal-oriented materialization of view partitions with change detection."""
