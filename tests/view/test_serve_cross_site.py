"""A web page the user visits cannot make ``serve`` work for it: cross-site subrequests are 403.

``serve`` has no endpoint that changes anything, but its pages cost work: a run's page
verifies the run (all its records), and the list verifies up to 20 runs per load. Any web
page could make the user's browser request them (``<img src="http://127.0.0.1:8765/run/...">``
in a loop; the ``Host`` is right, so the DNS rebinding check lets it through), and keep the
machine verifying for a page it cannot even read. Browsers say where a request comes from
(``Sec-Fetch-Site``, ``Sec-Fetch-Mode``, ``Sec-Fetch-Dest``): a request from another site is
refused before the ledger is read, unless it is a top-level navigation (a link the user
followed). The page's own requests (same origin), and an address typed in (``none``), are
served as before.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from serving import serving

from clearance import RunLedger


def get(url: str, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def fetch_metadata(site: str, mode: str, dest: str) -> dict[str, str]:
    return {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest}


@pytest.mark.parametrize(
    "headers",
    [
        fetch_metadata("cross-site", "no-cors", "image"),
        fetch_metadata("cross-site", "cors", "empty"),
        fetch_metadata("same-site", "no-cors", "script"),
        fetch_metadata("cross-site", "navigate", "iframe"),
    ],
)
async def test_a_cross_site_subrequest_is_refused_before_any_work(recorded, headers):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        for path in ("", f"run/{recorded.run_id}", f"run/{recorded.run_id}/state"):
            status, body = get(f"{server.url}{path}", headers)
            assert status == 403, (path, body)
            assert "another site" in body
        assert server.verdicts.verified == 0 and server.pages == {}


@pytest.mark.parametrize(
    "headers",
    [
        {},  # a client that sends no fetch metadata (curl, an older browser)
        fetch_metadata("none", "navigate", "document"),  # an address typed in
        fetch_metadata("same-origin", "navigate", "document"),  # a link on the list
        fetch_metadata("same-origin", "cors", "empty"),  # the live page's own polling
        fetch_metadata("cross-site", "navigate", "document"),  # a link followed from elsewhere
    ],
)
async def test_the_pages_own_requests_and_navigations_are_served(recorded, headers):
    with RunLedger(recorded.db) as ledger, serving(ledger) as server:
        assert get(server.url, headers)[0] == 200
        assert get(f"{server.url}run/{recorded.run_id}", headers)[0] == 200
