r"""Rendering the run page and the list of runs as self-contained HTML (Jinja2).

Every value reaches the page through Jinja2 with autoescaping on, so text from a model, a
file or an upstream agent is shown, never interpreted: ``<script>`` in a result is text; its
control characters and bidirectional overrides are shown as escapes (``\x1b``). The
graph data goes in as JSON inside a ``<script type="application/json">`` element with
``<``, ``>``, ``&`` and ``'`` escaped (Jinja2's ``tojson``), and is read with ``JSON.parse``;
the layout script builds the graph with ``textContent`` only. As defence in depth, each page
carries a Content-Security-Policy that allows no network access and runs only the page's own
script and style, named by their SHA-256 hashes (no inline event handlers, no ``eval``). The
one exception is a page ``serve`` sends for a run still going (or recorded running, its
process gone: it may be resumed): it may also fetch from its own origin
(``connect-src 'self'``), to poll the run's state and fetch itself again.

The timeline is inline SVG whose bars are placed by ``x`` and ``width`` attributes (an inline
``style`` would need the policy to allow it), each with a ``<title>`` for hovering.

The graph is laid out in the browser by dagre (MIT, shipped in this package as
``static/dagre.min.js`` with its licence in ``static/dagre.LICENSE``), inlined into the page so
the file opens without a network.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from clearance._core.shown_text import shown
from clearance._view.clearance_list import clearance_lists, short
from clearance._view.model import HIGHLIGHTED_KINDS, KIND_LABELS, RunView
from clearance._view.runs import RunRow
from clearance._view.timeline import build_timeline

__all__ = ["content_security_policy", "render_index", "render_run_page"]

_PACKAGE = "clearance._view"


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(_PACKAGE, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.filters["duration"] = _duration
    env.filters["utc"] = _utc
    env.filters["pct"] = _pct
    env.filters["seconds"] = _seconds
    env.filters["segment"] = _segment
    env.filters["short"] = short
    env.globals["highlighted_kinds"] = HIGHLIGHTED_KINDS
    return env


def _finalize(value: Any) -> Any:
    r"""Every value a template prints, text from the run with its controls as escapes.

    HTML escaping leaves control characters and bidirectional overrides as they are: a
    browser would show a title, goal or answer in another order than it reads, and ``cat``
    of a written page or ``curl`` of a served one would run a terminal escape. Run text is
    shown as `shown` writes it (ESC as ``\x1b``); our own script and style (`Markup`) are
    left alone, and ``tojson`` writes no raw control character.
    """
    if isinstance(value, str) and not isinstance(value, Markup):
        return shown(value)
    return value


@cache
def _static(name: str) -> str:
    return resources.files(_PACKAGE).joinpath("static", name).read_text(encoding="utf-8")


def _sha256_source(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(script: str | None, style: str, *, connect: bool = False) -> str:
    """The page's policy: no network, only the given inline script and style run.

    Args:
        script: The exact text of the page's one inline script, or ``None`` for a page
            that runs no script at all.
        style: The exact text of the page's one inline style sheet.
        connect: Whether the script may fetch from the page's own origin (a served page of
            a run still going polls its state); no other network access either way.

    Returns:
        A ``Content-Security-Policy`` value naming both by their SHA-256 hashes.
    """
    scripts = "'none'" if script is None else _sha256_source(script)
    return (
        "default-src 'none'; "
        f"script-src {scripts}; "
        f"style-src {_sha256_source(style)}; "
        + ("connect-src 'self'; " if connect else "")
        + "img-src data:; base-uri 'none'; form-action 'none'"
    )


def _assets(*scripts: str, connect: bool = False) -> dict[str, Any]:
    script = "\n".join(_static(name) for name in scripts)
    style = _static("view.css")
    return {
        # Our own packaged files, never run data.
        "script": Markup(script),
        "style": Markup(style),
        "csp": content_security_policy(script if scripts else None, style, connect=connect),
    }


def render_run_page(
    view: RunView,
    *,
    runs_link: str | None = None,
    live_url: str | None = None,
    now: datetime | None = None,
) -> str:
    """The HTML page of one run: its graph, timeline, every prompt by origin, the verdict.

    Args:
        view: The run (`load_run_view`).
        runs_link: Where a "all runs" link points (``serve``), or ``None`` for no link.
        live_url: Where the page polls the run's state while the run is going (``serve``'s
            ``/run/<id>/state``), or ``None`` for a page that never polls (a file). Ignored
            once the run has finished; for a run whose process is gone, the page polls it
            about every 15 seconds (``gone=1``), to show a resume.
        now: Where the timeline ends while the run is going (aware UTC); ``None`` for the
            clock (`build_timeline`).

    Returns:
        One self-contained HTML document (inline CSS and JS, no external resource).
    """
    template = _environment().get_template("run.html.j2")
    kinds = [*HIGHLIGHTED_KINDS, "other"]
    live = live_url if view.live else None
    # A run whose process is gone may be resumed: its page watches for that, slowly.
    watch = live_url if view.process_gone and view.run.finished_at is None else None
    return template.render(
        view=view,
        graph=_shown_graph(view.graph_data()),
        clearances=clearance_lists(view),
        timeline=build_timeline(view, now=now),
        kinds=[(k, KIND_LABELS[k]) for k in kinds],
        runs_link=runs_link,
        live_url=live,
        watch_url=watch,
        **_assets("dagre.min.js", "view.js", connect=live is not None or watch is not None),
    )


def _shown_graph(graph: dict[str, Any]) -> dict[str, Any]:
    r"""The graph data with each node's id, status and label as `shown` writes them.

    ``tojson`` bypasses `_finalize`, and the script puts these in with ``textContent``: a
    bidirectional override in a hand-edited ledger's task id would show it reordered. The
    script finds nodes by ``index`` only, so the escapes change no lookup.
    """
    nodes = [
        {**node, **{key: shown(str(node[key])) for key in ("id", "status", "label")}}
        for node in graph["nodes"]
    ]
    return {**graph, "nodes": nodes}


def render_index(
    runs: Sequence[RunRow], *, broken: Sequence[str] = (), link_prefix: str = "/run/"
) -> str:
    """The HTML list of runs (``serve``'s home page), newest first.

    Each run's team and goal are cut to `MAX_LABEL_CHARS` (`short`): the list is rendered
    on every load, and a goal of a megabyte was a megabyte of every load. Its page has
    them whole.

    Args:
        runs: The runs to list, with their verdicts (`VerdictCache.rows`).
        broken: One line for each run whose row cannot be read (its `MalformedRecord`'s
            text), shown below the list as text (escaped).
        link_prefix: Each run links to ``link_prefix`` + its id (URL-quoted whole, ``/``
            included).

    Returns:
        One self-contained HTML document.
    """
    template = _environment().get_template("index.html.j2")
    return template.render(runs=runs, broken=broken, link_prefix=link_prefix, **_assets())


def _segment(text: str) -> str:
    """``text`` quoted whole as one segment of a URL's path: ``/``, ``?`` and ``#`` too.

    Jinja2's ``urlencode`` keeps ``/``: a run id ``x/state`` (the ledger is not trusted)
    linked to that run's state endpoint instead of its page.
    """
    return quote(text, safe="")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def _seconds(seconds: float) -> str:
    """A time on the timeline's axis: milliseconds under a second."""
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else _duration(seconds)


def _pct(value: float) -> str:
    """A percentage for an SVG length (``12.345%``)."""
    return f"{value:.3f}%"


def _utc(moment: Any) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}Z"
