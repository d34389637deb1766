"""Views: goal-oriented materialization of parameterized data with change detection."""
