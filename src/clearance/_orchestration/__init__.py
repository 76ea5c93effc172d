"""Orchestration layer: runs task graphs and teams, with the coordinator's planning and synthesis."""
