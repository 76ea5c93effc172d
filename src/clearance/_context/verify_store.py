"""Verifying a ``store:<namespace>/<key>`` item: a granted read, shown as read, and its writer.

A store entry reaches a prompt only as a read of a recorded tool call of the same subject
(the ``store_reads`` of its record). The item must be such a read, of a namespace the
clearance grants for reads, holding the content that read recorded (the shown content's own
read granted: ``store:a/b/c`` names both ``a`` + ``b/c`` and ``a/b`` + ``c``).

Its block heading, ``Store entry <namespace>/<key> (written by <writer>)`` (`store_title`),
tells the model whose text it reads, so it is checked too: it must name the item's entry;
its writer must be the one the read recorded (runs recorded since reads named their
writer); and, with the store at hand, while the entry is unchanged since the read (same
``version`` and ``updated_at``; ``updated_at`` alone for a read recorded before reads named
the version), the stored value and the entry's writer must be those shown.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clearance._context.clearance import Clearance
from clearance._context.render import one_line
from clearance._context.tool_sections import store_title
from clearance._context.verify_facts import Problem, StoreLookup
from clearance._core.prompt import sha256_text
from clearance._state.store import StoreEntry

__all__ = ["check_store_item"]

_PREFIX, _SUFFIX = store_title("\0", "\0").split("\0")[0], ")"


def check_store_item(
    subject: str,
    origin: str,
    ref: str,
    item: Mapping[str, Any],
    reads: Sequence[Mapping[str, Any]],
    clearance: Clearance,
    store: StoreLookup | None,
) -> Iterator[Problem]:
    """Check one store item against the reads of its subject's tool calls.

    Args:
        subject: The prompt's call subject.
        origin: The item's origin, ``store:<ref>``.
        ref: ``<namespace>/<key>``.
        item: Its manifest entry (``sha256``, ``title``).
        reads: The recorded reads of the subject's tool calls that name ``ref``.
        clearance: The subject's clearance.
        store: A lookup into the run's context store, or ``None``.

    Yields:
        ``(origin, reason)`` for each problem.
    """
    digest = item.get("sha256")
    if not reads:
        yield origin, f"no recorded tool call of {subject} read this store entry"
        return
    if not any(clearance.admits_store(str(r["namespace"])) for r in reads):
        yield origin, "the store namespace is not granted for reads"
        return
    shown = [r for r in reads if r.get("sha256") == digest]
    if not shown:
        yield origin, "the content is not what the recorded tool call read"
        return
    granted = [r for r in shown if clearance.admits_store(str(r["namespace"]))]
    if not granted:
        # two reads of one origin (`a` + `b/c`, `a/b` + `c`): the one shown must be granted
        yield origin, "the store namespace of the content shown is not granted for reads"
        return
    yield from _check_writer(origin, ref, item, granted)
    if store is not None:
        yield from _check_stored(origin, item, granted, store)


def _check_writer(
    origin: str, ref: str, item: Mapping[str, Any], shown: Sequence[Mapping[str, Any]]
) -> Iterator[Problem]:
    """The heading names the entry, and (when the read recorded it) its writer."""
    title = one_line(str(item.get("title")))
    prefix = one_line(f"{_PREFIX}{ref}")
    if not (title.startswith(prefix) and title.endswith(_SUFFIX)):
        yield origin, f"the block is titled {title!r}, which is not a heading of entry {ref!r}"
        return
    recorded = {str(r["writer"]) for r in shown if "writer" in r}
    if recorded and title not in {one_line(store_title(ref, w)) for w in recorded}:
        named = title[len(prefix) : -len(_SUFFIX)].removeprefix(" (written by ")
        yield (
            origin,
            f"the heading names writer {named!r}, but the read recorded "
            f"{' or '.join(map(repr, sorted(recorded)))}",
        )


def _check_stored(
    origin: str, item: Mapping[str, Any], shown: Sequence[Mapping[str, Any]], store: StoreLookup
) -> Iterator[Problem]:
    """Against the store: an entry unchanged since the read shown holds what was shown.

    The entry each read names is looked up by its recorded namespace and key (a namespace
    may hold "/", so the origin alone cannot name it); an entry written since that read
    (another version, or another ``updated_at``) has nothing to compare with. Two writes
    within one tick of the clock share an ``updated_at``, never a version.
    """
    title = one_line(str(item.get("title")))
    for read in shown:
        entry = store(str(read["namespace"]), str(read["key"]))
        if entry is None or not _unchanged(read, entry):
            continue
        if sha256_text(entry.value) != item.get("sha256"):
            yield origin, "the content is not the value in the store"
            return
        if title != one_line(store_title(f"{entry.namespace}/{entry.key}", entry.agent)):
            yield (
                origin,
                f"the block is titled {title!r}, but the store says {entry.agent!r} wrote it",
            )
            return


def _unchanged(read: Mapping[str, Any], entry: StoreEntry) -> bool:
    """Whether ``entry`` is still the version ``read`` recorded (no version: same updated_at)."""
    if read.get("updated_at") != entry.updated_at.isoformat():
        return False
    live = getattr(entry, "version", None)  # a lookup of the caller's may give none
    if "version" not in read or live is None:  # recorded before reads named the version
        return True
    version = read["version"]
    return version.__class__ is int and version == live
