"""Agents layer: fresh-context dispatch, sessions, workspaces, spawning, tool loop, delegation."""
