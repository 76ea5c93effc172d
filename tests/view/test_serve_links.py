"""Each run in ``serve``'s list links to that run's page, whatever its id holds.

The list quoted run ids with Jinja2's ``urlencode``, which leaves ``/`` as it is: a run whose
id (from the ledger, which is not trusted) is ``x/state`` linked to the JSON state endpoint,
and one whose id is ``x/../..`` to the list itself, since a browser resolves the dot
segments. Each id is now quoted whole (``/`` too), as the live page's state address already
was.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urljoin

import pytest
from serving import fetch, serving

from clearance import RunLedger
from clearance.models import Usage


@pytest.mark.parametrize("run_id", ["run_a/state", "run_b/../..", "run_c?x#y", "run_d%2Fstate"])
def test_every_run_in_the_list_links_to_its_own_page(tmp_path, run_id):
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        ledger.start_run(run_id=run_id, team="t", goal=None, graph=None)
        ledger.finish_run(run_id, status="completed", synthesis=None, usage=Usage(), error=None)
        ledger.flush()
        with serving(ledger) as server:
            status, _, index = fetch(server.url)
            assert status == 200
            links = re.findall(r'<a href="([^"]+)"><code>', index)
            assert len(links) == 1
            target = urljoin(server.url, unescape(links[0]))  # as a browser resolves it
            status, headers, page = fetch(target)
    assert status == 200, (target, page[:300])
    assert headers["Content-Type"].startswith("text/html")
    assert "<title>clearance run " in page
