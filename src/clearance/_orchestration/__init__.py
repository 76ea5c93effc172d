"""Orchestration layer: runs task graphs and teams; the coordinator plans and synthesizes."""
