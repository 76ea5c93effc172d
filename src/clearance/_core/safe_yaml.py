"""Reading YAML a person wrote, with caps a hostile or broken file cannot get past.

A team file is trusted to say what the person wants, not to be well formed: it may be a FIFO
that never ends, ``/dev/zero``, a 50 MB file, a "billion laughs" alias bomb (a few hundred
bytes whose aliases expand to gigabytes once anything walks the loaded value, such as
``json.dumps`` of an ``output_schema``), or nesting deep enough to exhaust the stack. Each is
refused with a `ConfigError` before it costs more than a moment:

- only regular files are read (opened without blocking, checked with ``fstat`` on the open
  descriptor), and at most `MAX_YAML_BYTES` of them;
- nesting deeper than `MAX_YAML_DEPTH` collections is refused, and so is a file of more
  than `MAX_YAML_NODES` keys, values and aliases (one composed a little past it costs a
  fraction of a second);
- the loaded value may not be larger than `MAX_YAML_EXPANDED` characters once every alias is
  expanded (a file without aliases is never near it), and an alias may not refer to a node
  that contains it (a recursive value);
- a number may not be longer than `MAX_YAML_NUMBER` characters, nor out of Python's range.

A key given twice in one mapping is refused too. YAML does not allow it ("The content of a
mapping node is an unordered set of key/value node pairs, with the restriction that each of
the keys is unique", YAML 1.2.2, section 3.2.1.1), and PyYAML would keep the last value
without a word: a second ``tasks:`` list would silently replace the first. Keys merged in
with ``<<`` may still be overridden by the mapping's own keys, as the merge key provides.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from clearance._core.errors import ConfigError

__all__ = [
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_EXPANDED",
    "MAX_YAML_NODES",
    "MAX_YAML_NUMBER",
    "gc_paused",
    "load_yaml_file",
]

MAX_YAML_BYTES = 1 << 20
"""Largest YAML file read, in bytes (1 MiB)."""

MAX_YAML_DEPTH = 64
"""Deepest nesting of sequences and mappings."""

MAX_YAML_EXPANDED = 8 << 20
"""Largest loaded value, in characters of scalars plus two per collection, aliases expanded."""


MAX_YAML_NUMBER = 400
"""Longest number read, in characters (a team file's numbers are a few digits long)."""

MAX_YAML_NODES = 250_000
"""Most keys, values and aliases in one file (1 MiB of 23,000 short tasks holds 160,000)."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
"""The tag of the merge key (``<<``)."""

_STR_TAG = "tag:yaml.org,2002:str"
"""The tag of a string, whose loaded value is the scalar itself."""


class _LimitError(yaml.YAMLError):
    """A YAML document went past one of the caps."""


try:  # libyaml's scanner and parser (C, several times faster), when PyYAML was built with it
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML's wheels bundle libyaml
    CParser = None  # type: ignore[misc,assignment]

_EVENTS: tuple[type, ...] = (CParser,) if CParser is not None else (Reader, Scanner, Parser)
"""Where `_LimitedLoader`'s events come from."""


class _LimitedLoader(Composer, *_EVENTS, SafeConstructor, Resolver):  # type: ignore[misc]
    """`yaml.SafeLoader`'s composition, measuring depth, node count and alias-expanded size.

    The events come from libyaml's parser (PyYAML's own without it); the nodes are composed
    here, in Python, one at a time (`compose_node`), so every cap is checked before a node
    is added. libyaml's own composition (``yaml.CSafeLoader``) would compose the whole
    document, in C, before any check. The composition is PyYAML's `Composer` inlined into
    one method per node (no path resolvers, a plain scalar's tag resolved once per value):
    a 1 MiB file is composed in a fraction of a second, and past `MAX_YAML_NODES` it stops.
    """

    def __init__(self, stream: str) -> None:
        if CParser is not None:
            CParser.__init__(self, stream)
        else:  # pragma: no cover - without libyaml
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self.nodes_composed = 0
        """Nodes (aliases included) composed so far: at most `MAX_YAML_NODES` + 1."""
        self._sizes: dict[int, int] = {}  # id of an anchored node -> its expanded size
        self._tags: dict[tuple[str, Any], str] = {}  # (scalar, implicit) -> resolved tag

    def compose_node(self, parent: Any, index: Any) -> Any:
        return self._compose()[0]

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if type(node) is yaml.ScalarNode and node.tag == _STR_TAG:
            return node.value  # what the str constructor returns, without its bookkeeping
        return super().construct_object(node, deep)

    def _compose(self) -> tuple[yaml.Node, int]:
        """The next node and its size with aliases expanded, every cap checked."""
        event = self.get_event()
        self.nodes_composed += 1
        if self.nodes_composed > MAX_YAML_NODES:
            raise _LimitError(
                f"holds more than {MAX_YAML_NODES} keys and values "
                f"(line {event.start_mark.line + 1})"
            )
        if type(event) is yaml.AliasEvent:
            return self._alias(event)
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            raise yaml.composer.ComposerError(
                f"found duplicate anchor {anchor!r}; first occurrence",
                self.anchors[anchor].start_mark,
                "second occurrence",
                event.start_mark,
            )
        node: yaml.Node
        if type(event) is yaml.ScalarEvent:
            node, size = self._scalar(event), len(event.value)
            if anchor is not None:
                self.anchors[anchor] = node
        else:
            node, size = self._collection(event, anchor)
        if anchor is not None:
            self._sizes[id(node)] = size
        return node, size

    def _alias(self, event: Any) -> tuple[yaml.Node, int]:
        target = self.anchors.get(event.anchor)
        if target is None:
            raise yaml.composer.ComposerError(
                None, None, f"found undefined alias {event.anchor!r}", event.start_mark
            )
        size = self._sizes.get(id(target))
        if size is None:
            line = event.start_mark.line + 1
            raise _LimitError(f"the alias *{event.anchor} (line {line}) refers to itself")
        return target, size

    def _scalar(self, event: Any) -> yaml.ScalarNode:
        tag = event.tag
        if tag is None or tag == "!":
            key = (event.value, event.implicit)
            tag = self._tags.get(key)
            if tag is None:
                tag = self._tags[key] = self.resolve(yaml.ScalarNode, *key)  # type: ignore[no-untyped-call]
        return yaml.ScalarNode(
            tag, event.value, event.start_mark, event.end_mark, style=event.style
        )

    def _collection(self, start: Any, anchor: str | None) -> tuple[yaml.Node, int]:
        """A sequence or mapping from its start event on, its children composed in turn."""
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            mark = start.start_mark
            raise _LimitError(
                f"nested more than {MAX_YAML_DEPTH} levels deep (line {mark.line + 1})"
            )
        mapping = type(start) is yaml.MappingStartEvent
        kind = yaml.MappingNode if mapping else yaml.SequenceNode
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, start.implicit)  # type: ignore[no-untyped-call]
        children: list[Any] = []
        node: Any = kind(tag, children, start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        size = 2
        end = yaml.MappingEndEvent if mapping else yaml.SequenceEndEvent
        while type(self.peek_event()) is not end:
            child, child_size = self._compose()
            size += child_size
            if mapping:
                value, value_size = self._compose()
                size += value_size
                children.append((child, value))
            else:
                children.append(child)
            if size > MAX_YAML_EXPANDED:
                raise _LimitError(
                    f"expands to more than {MAX_YAML_EXPANDED} characters through aliases "
                    f"(near line {node.start_mark.line + 1})"
                )
        node.end_mark = self.get_event().end_mark
        self._depth -= 1
        if mapping:
            self._check_keys(node)
        return node, size

    def _check_keys(self, node: yaml.MappingNode) -> None:
        """Refuse a key ``node`` gives twice, compared as loaded (``1`` and ``0x1`` are one key).

        Checked as the node is composed, before any merge (``<<``) rewrites its pairs: the
        merge key and the keys it merges in are not the mapping's own. A key that is itself
        a collection is left to the constructor (which refuses it: a mapping key must be
        hashable). A string key is its own loaded value, so only other keys are constructed.
        """
        seen: dict[Any, Any] = {}  # key -> the key node that first gives it
        for key_node, _ in node.value:
            if type(key_node) is not yaml.ScalarNode or key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node)
            first = seen.setdefault(key, key_node)
            if first is not key_node:
                line, first_line = key_node.start_mark.line + 1, first.start_mark.line + 1
                where = f"line {line}" if first_line == line else f"lines {first_line} and {line}"
                raise _LimitError(f"the key {key!r} is given twice ({where})")


def _number(construct: Any) -> Any:
    """``construct`` (PyYAML's int or float constructor), within `MAX_YAML_NUMBER`.

    Python refuses to read an integer of more than 4,300 digits (``ValueError``), a
    base-60 number (``1:30:00``) of many parts takes time quadratic in its length, and one
    past the float range raises ``OverflowError``: each is a `_LimitError` naming the line.
    """

    def checked(loader: _LimitedLoader, node: yaml.ScalarNode) -> Any:
        line = node.start_mark.line + 1
        if len(node.value) > MAX_YAML_NUMBER:
            raise _LimitError(
                f"the number on line {line} is over {MAX_YAML_NUMBER} characters long"
            )
        try:
            return construct(loader, node)
        except (ValueError, OverflowError):
            raise _LimitError(f"the number on line {line} is out of range") from None

    return checked


for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
    _LimitedLoader.add_constructor(_tag, _number(_LimitedLoader.yaml_constructors[_tag]))


def _read_capped(path: str) -> bytes:
    """The bytes of ``path``, a regular file of at most `MAX_YAML_BYTES` bytes."""
    # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("not a regular file", source=path)
        if info.st_size > MAX_YAML_BYTES:
            raise ConfigError(
                f"the file is {info.st_size} bytes, over the limit of {MAX_YAML_BYTES}",
                source=path,
            )
        data = file.read(MAX_YAML_BYTES + 1)  # a file growing while read stops here too
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(f"the file is over the limit of {MAX_YAML_BYTES} bytes", source=path)
    return data


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a file's values are made.

    Loading a file (and `RunSpec.from_file` validating it) makes hundreds of thousands of
    objects and frees none, so every collection walks a heap that only grows: with the
    collector on, three quarters of the time loading a 1 MiB file took went to collections
    that found nothing. What the collector would free is freed once it is back on (it is
    left off for a caller that had turned it off).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    """Load one YAML document from a file, within the caps of this module.

    Args:
        path: The file; it must be a regular file (a symlink to one is followed).

    Returns:
        The loaded value (``None`` for an empty document), built by PyYAML's safe loader.

    Raises:
        ConfigError: The file cannot be opened, is not a regular file, is over
            `MAX_YAML_BYTES`, is not UTF-8, is not valid YAML, nests deeper than
            `MAX_YAML_DEPTH`, expands past `MAX_YAML_EXPANDED` through aliases, or holds a
            recursive alias, or a number over `MAX_YAML_NUMBER` characters or out of range.
            The message names the file and, where known, the line.
    """
    source = os.fspath(path)
    try:
        data = _read_capped(source)
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", source=source) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start} cannot be decoded)", source=source
        ) from exc
    loader: _LimitedLoader | None = None
    try:
        loader = _LimitedLoader(text)  # checks the characters at once
        with gc_paused():
            return loader.get_single_data()
    except _LimitError as exc:
        raise ConfigError(str(exc), source=source) from exc
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
            line = text.count("\n", 0, exc.position)
        where = f" (line {line + 1})" if line is not None else ""
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):
            # libyaml's own cap (1,000 levels), met while it scans ahead past ours
            raise ConfigError(
                f"nested more than {MAX_YAML_DEPTH} levels deep{where}", source=source
            ) from exc
        raise ConfigError(f"not valid YAML{where}", source=source) from exc
    except RecursionError as exc:  # pragma: no cover - the depth cap comes first
        raise ConfigError("nested too deeply", source=source) from exc
    finally:
        if loader is not None:
            loader.dispose()
