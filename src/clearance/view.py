"""The run page: a recorded run as HTML (``clearance view`` and ``clearance serve``).

Imports Jinja2, so import this namespace only where a page is made.
"""

from clearance._view import load_run_view, render_run_page
from clearance._view.serve import make_server

__all__ = ["load_run_view", "make_server", "render_run_page"]
