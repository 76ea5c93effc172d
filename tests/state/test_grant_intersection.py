"""`StoreGrants.intersect`: what an agent acting for a caller may do is what both may do."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance._state.grants import StoreGrants, StoreView

SEGMENTS = st.sampled_from(["hr", "notes", "n", "team", "hr2"])
NAMESPACES = st.lists(SEGMENTS, min_size=1, max_size=3).map("/".join)
PATTERNS = st.one_of(
    NAMESPACES, NAMESPACES.map(lambda n: n + "/*"), SEGMENTS.map(lambda s: s + "*")
)
ACCESS = st.sampled_from(["read", "write", "read_write"])
GRANTS = st.dictionaries(PATTERNS, ACCESS, max_size=4).map(StoreGrants.parse)


@given(GRANTS, GRANTS, NAMESPACES, st.sampled_from(["read", "write"]))
def test_the_intersection_allows_exactly_what_both_allow(own, ceiling, namespace, operation):
    both = own.allows(namespace, operation) and ceiling.allows(namespace, operation)
    assert own.intersect(ceiling).allows(namespace, operation) == both


def test_a_view_under_a_ceiling_notes_what_its_own_grants_would_have_lent(tmp_path):
    from clearance import AccessDenied, ContextStore

    with ContextStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.set("hr/salaries", "alice", "secret", "hr")
        store.set("notes/a", "k", "a note", "me")
        own = StoreGrants.parse({"hr/*": "read", "notes/*": "read_write"})
        view = StoreView(store, agent="hr_bot", grants=own,
                         ceiling=StoreGrants.parse({"notes/*": "read"}))  # fmt: skip
        assert view.get("notes/a", "k") == "a note"
        with pytest.raises(AccessDenied):
            view.get("hr/salaries", "alice")
        with pytest.raises(AccessDenied):
            view.set("notes/a", "k", "x")
        assert view.lent_refusals == [("hr/salaries", "read"), ("notes/a", "write")]
        assert [e.key for e in view.search("secret")] == []
