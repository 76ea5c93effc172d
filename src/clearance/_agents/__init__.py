"""The agents layer: fresh-context dispatch, sessions, workspaces, limits, spawning."""
