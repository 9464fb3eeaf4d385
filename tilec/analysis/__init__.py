"""Analyses of compiled schedules (the shared-memory race check)."""
