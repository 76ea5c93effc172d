"""The run page: an HTML view of a recorded run (graph, prompts by origin, verdict)."""

from clearance._view.model import RunView, load_run_view
from clearance._view.page import render_index, render_run_page

__all__ = ["RunView", "load_run_view", "render_index", "render_run_page"]
