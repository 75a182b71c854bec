"""Invoke tasks, one module per area; tasks.py composes them. Tasks stay thin: parse, call, print."""
