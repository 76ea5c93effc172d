"""Agents: the tool-using agent loop, tools and delegation."""
