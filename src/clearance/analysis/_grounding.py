"""Grounding: a model's sentence reaches a report only if everything it names is real.

A sentence fails when it holds code (a fenced or indented block, a line of source, a
comment), a control character (a terminal escape, a bidirectional override), markup (a
Markdown link or image, an HTML tag, a URL), a rule code that is not one of the findings
(``S102.5``), a name written as code (``snake_case``, ``CamelCase``, ``dotted.name``,
``call()``, anything in backticks, a ``.py`` file) that is not a module or symbol of the
package, a count (lines, functions, findings, complexity, fan-in) that is not the named
module's or function's, when it speaks of the prompt rather than the code ("this task",
"the brief"), when it does not end (cut off mid-sentence), when it is longer than
`MAX_SENTENCE_CHARS` (no sentence of a review is), or when it repeats a sentence already
kept. What fails is left out and counted, never printed with a warning.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clearance.analysis._rank import fan_in

__all__ = ["MAX_SENTENCE_CHARS", "Grounded", "Known", "ground", "sentence_problem"]

_FENCE = re.compile(r"(```|~~~)")
_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |return\b|raise\b|@\w|#|>>>|[\w.]+\s*=[^=])"
)
_RULE = re.compile(r"\b[A-Z]{1,4}\d{2,4}(?:\.\d+)*\b")
_BACKTICKED = re.compile(r"`([^`]*)`")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?")
_ENDED = re.compile(r"[.!?][\"')\]*]*$")
_META = re.compile(
    r"\b(?:this|the|your|my) (?:task|brief|summary|prompt|instructions?|request|answer)\b"
    r"|\ba summary of\b",
    re.IGNORECASE,
)
_CALL_OPEN = re.compile(r"(?<!\w)[A-Za-z_]\w*\([^)\s]")
"""A call's name, its ``(`` and its first argument's first character: `_call_span`'s start."""
MAX_SENTENCE_CHARS = 1000
"""Longest sentence checked; a longer one is left out as ``"too long"`` before any check."""
_MIN_WORDS = 3
"""Fewer words than this is a fragment ("Module types."), not a statement."""
_NUMBER = r"((?:(?<![\w\-\u2212])[\-\u2212])?\b\d+)"
"""A count as written, with its sign: ``line -3`` states a line, one that cannot exist."""
_COUNT = re.compile(
    rf"{_NUMBER} (?:lines?|functions?|findings?|modules?)\b|\bcomplexity (?:of )?{_NUMBER}\b"
    rf"|\bline {_NUMBER}\b|\bimported by {_NUMBER}\b"
)
_PATH_RUN = re.compile(r"[\w/.-]+")
_PY_AT = re.compile(r"(?=\w\.py\b)")
_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_HEADING = re.compile(r"^#{1,6} +[A-Z][a-z]+(?: [A-Za-z-]+)*:?$")
_ALLOWED = frozenset(dir(builtins)) | frozenset(keyword.kwlist)
_WORD = re.compile(r"\w")
_MARKUP = re.compile(r"\]\(|\]:|<[A-Za-z/!?]|://")
"""A Markdown link or image (``![x](https://...)``, ``[1]: ...``), an HTML tag, or a URL:
rendered, the report would fetch or link what a model chose (an image's URL can carry
what the model saw out), and no module or symbol is written so."""
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Control characters (tab and newline aside), DEL, C1 and the bidirectional overrides:
a terminal escape or a reordering of the report's text, never a sentence of a review."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Known:
    """What a report may name: the package's modules, symbols and findings.

    Attributes:
        modules: Module paths (``decoder.py``), slugs (``decoder``) and the package name.
        symbols: Function, method, class and public names, full and last part.
        codes: Rule codes ruff reported.
        numbers: The counts a sentence may state about each module or symbol (its lines,
            functions, findings, fan-in; a function's line, length and complexity).
        any_number: Every count of ``numbers`` (what a sentence naming nothing may state).
        name_lengths: The lengths of the names of ``numbers``, shortest first.
    """

    modules: frozenset[str]
    symbols: frozenset[str]
    codes: frozenset[str]
    numbers: Mapping[str, frozenset[int]] = field(default_factory=dict)
    any_number: frozenset[int] = field(init=False, default=frozenset())
    name_lengths: tuple[int, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        """Work out, once, what every sentence's number check reads (`_number_problem`)."""
        object.__setattr__(self, "any_number", frozenset().union(*self.numbers.values()))
        object.__setattr__(self, "name_lengths", tuple(sorted({len(n) for n in self.numbers})))

    @classmethod
    def from_facts(cls, modules: Iterable[Mapping[str, Any]]) -> Known:
        """Everything the ``module_facts`` results name."""
        modules = list(modules)
        paths: set[str] = set()
        symbols: set[str] = set()
        codes: set[str] = set()
        numbers: dict[str, set[int]] = {}
        fans = fan_in(modules)
        for facts in modules:
            path = str(facts.get("module", ""))
            slug = str(facts.get("slug", ""))
            package = str(facts.get("package", ""))
            paths |= {path, path.rsplit("/", 1)[-1], slug, package}
            if package and slug:
                paths.add(f"{package}.{slug}")
            for entry in [*facts.get("public", ()), *facts.get("most_complex", ())]:
                name = str(entry.get("name", ""))
                parts = name.split(".")
                symbols |= {name, parts[-1], *(".".join(parts[i:]) for i in range(len(parts)))}
                symbols.update(parts[:-1])  # the classes of methods
            excerpt = facts.get("excerpt")
            if isinstance(excerpt, Mapping):
                symbols.add(str(excerpt.get("symbol", "")))
            codes |= set(facts.get("rule_counts") or {})
            codes |= {str(f.get("code")) for f in facts.get("findings", ())}
            counts = {
                int(facts.get(key) or 0) for key in ("lines", "functions", "public_count")
            } | {int(facts.get("findings_total") or 0), fans.get(slug, 0)}
            for name in (path, path.rsplit("/", 1)[-1], slug):
                numbers.setdefault(name, set()).update(counts)
            for function in facts.get("most_complex", ()):
                values = {int(function.get(k) or 0) for k in ("line", "lines", "complexity")}
                name = str(function.get("name", ""))
                for part in {name, name.rsplit(".", 1)[-1]}:
                    numbers.setdefault(part, set()).update(values)
        paths.discard("")
        symbols.discard("")
        return cls(
            modules=frozenset(paths),
            symbols=frozenset(symbols),
            codes=frozenset(codes),
            numbers={k: frozenset(v) for k, v in numbers.items() if k},
        )

    def names(self, token: str) -> bool:
        """Whether ``token`` (as written in a sentence) is a real module or symbol."""
        bare = token.strip().strip("`'\".,:;!?").removesuffix("()")
        if not bare:
            return True
        if bare in self.modules or bare in self.symbols or bare in _ALLOWED:
            return True
        parts = bare.split(".")
        if len(parts) > 1:
            if bare.endswith(".py"):
                return False  # a file name the package does not have
            head = ".".join(parts[:-1])
            return (head in self.modules or head in self.symbols) and parts[-1] in self.symbols
        return False


@dataclass(kw_only=True, slots=True)
class Grounded:
    """A model text, checked sentence by sentence.

    Attributes:
        sentences: The sentences that passed, in order.
        dropped: How many failed, by reason (``"code"``, ``"rule code"``, ``"name"``).
    """

    sentences: list[str] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def text(self) -> str:
        """The sentences that passed, joined with spaces."""
        return " ".join(self.sentences)

    @property
    def dropped_count(self) -> int:
        """How many sentences were left out."""
        return sum(self.dropped.values())


def _code_like(token: str) -> bool:
    """Whether a bare word is written as code (not as English)."""
    word = token.removesuffix("()")
    if "." in word and all(len(part) <= 2 for part in word.split(".")):
        return False  # an abbreviation: e.g, i.e
    return (
        token.endswith("()")
        or "_" in word.strip("_")
        or word.startswith("_")
        or "." in word
        or re.search(r"[a-z][A-Z]|[A-Z]{2,}[a-z]", word) is not None
    )


def sentence_problem(sentence: str, known: Known) -> str | None:
    """Why one sentence fails grounding, or ``None``.

    Returns:
        ``"control character"``, ``"markup"``, ``"code"``, ``"rule code"``, ``"name"``,
        ``"number"``, ``"about the prompt"``,
        ``"incomplete"`` (no final ``.``, ``!`` or ``?``), ``"too long"`` (over
        `MAX_SENTENCE_CHARS`), or ``None`` when it passes.
    """
    if len(sentence) > MAX_SENTENCE_CHARS:
        return "too long"
    if _CONTROL.search(sentence):
        return "control character"
    if _MARKUP.search(sentence):
        return "markup"
    if _FENCE.search(sentence) or _CODE_LINE.match(sentence) or sentence.startswith(("    ", "\t")):
        return "code"
    if not _ENDED.search(sentence) or len(sentence.split()) < _MIN_WORDS:
        return "incomplete"
    if _META.search(sentence):
        return "about the prompt"
    for code in _RULE.findall(sentence):
        if code not in known.codes:
            return "rule code"
    for quoted in _BACKTICKED.findall(sentence):
        if any(ch in quoted for ch in "=(){};") and not quoted.endswith("()"):
            return "code"
        if not known.names(quoted) and not _RULE.fullmatch(quoted):
            return "name"
    plain = _BACKTICKED.sub(" ", sentence)
    if _call_span(plain) is not None:
        return "code"  # a call with arguments: ``bool("")``
    spans = _file_spans(plain)
    for start, end in spans:
        if not known.names(plain[start:end]):
            return "name"
    for start, end in reversed(spans):
        plain = f"{plain[:start]} {plain[end:]}"
    for token in _TOKEN.findall(plain):
        if _code_like(token) and not known.names(token):
            return "name"
    return _number_problem(sentence, known)


def _call_span(text: str) -> tuple[int, int] | None:
    r"""Where ``text`` first writes a call with arguments (``bool("")``), in linear time.

    The span ``\b[A-Za-z_]\w*\([^)\s][^)]*\)`` finds, searched; that expression is
    quadratic on open calls without their ``)`` (``x(y x(y x(y ...``: each one read the rest
    of the text). A match starts where a word starts (so each word is read once) and ends at
    the first ``)`` after its first argument's character; the first start followed by a
    ``)`` anywhere is the first match, and when the first start has none, no later one has.
    """
    opened = _CALL_OPEN.search(text)
    if opened is None:
        return None
    closed = text.find(")", opened.end())
    return None if closed < 0 else (opened.start(), closed + 1)


def _file_spans(text: str) -> list[tuple[int, int]]:
    r"""Where ``text`` names ``.py`` files: what ``[\w/.-]*\w\.py\b`` finds, in linear time.

    That expression, searched, is quadratic on a long run of path characters (``a.a.a...``,
    a line of dots: minutes for one answer). A match starts where a run of ``[\w/.-]``
    starts and ends after the run's last ``x.py``, so each run is read once.
    """
    spans = []
    for run in _PATH_RUN.finditer(text):
        starts = [m.start() for m in _PY_AT.finditer(text, run.start(), run.end())]
        if starts:
            spans.append((run.start(), starts[-1] + 4))
    return spans


def _number_problem(sentence: str, known: Known) -> str | None:
    """``"number"`` when a count the sentence states is not one of the named things'."""
    stated = [
        int(n.replace("\u2212", "-")) for groups in _COUNT.findall(sentence) for n in groups if n
    ]
    if not stated or not known.numbers:
        return None
    named = _named(sentence, known)
    allowed = (
        frozenset().union(*(known.numbers[name] for name in named)) if named else known.any_number
    )
    return None if all(n in allowed for n in stated) else "number"


def _named(sentence: str, known: Known) -> list[str]:
    """The names of ``known.numbers`` that stand alone in ``sentence``.

    Alone: no word character or dot before, no word character after. Each place a name may
    start is tried with each length a name has: the cost grows with the sentence, not with
    the package (a regular expression per name made a 100,000 character answer about a
    300-module package take minutes to check).
    """
    found: list[str] = []
    size = len(sentence)
    for start in range(size):
        if start and (sentence[start - 1] == "." or _WORD.match(sentence[start - 1])):
            continue
        for length in known.name_lengths:
            end = start + length
            if end > size:
                break
            if end < size and _WORD.match(sentence[end]):
                continue
            if sentence[start:end] in known.numbers:
                found.append(sentence[start:end])
    return found


def ground(text: str | None, known: Known, seen: set[str] | None = None) -> Grounded:
    """Check a model's text sentence by sentence (see the module docstring).

    Args:
        text: The model's text.
        known: What it may name.
        seen: Sentences already kept elsewhere (lower-cased); a repeat of one is left out
            as ``"repeat"``. Kept sentences are added to it.

    A fenced block is left out whole and counted once, as ``"code"``; so is a fence with
    no partner.
    """
    grounded = Grounded()
    seen = set() if seen is None else seen
    if not text:
        return grounded
    lines = text.splitlines()
    fences = [i for i, raw in enumerate(lines) if _FENCE.search(raw)]
    inside: set[int] = set()
    for start, end in zip(fences[::2], fences[1::2], strict=False):
        inside.update(range(start, end + 1))
    for index, raw in enumerate(lines):
        if index in inside or index in fences:
            if index in fences and (index not in inside or index in fences[::2]):
                grounded.dropped["code"] += 1  # a block counts once; a stray fence too
            continue
        if not raw.strip():
            continue
        if raw.startswith(("    ", "\t")) and not _BULLET.match(raw):
            grounded.dropped["code"] += 1
            continue
        line = _BULLET.sub("", raw).strip()
        if _HEADING.match(line):
            continue  # markup, not a statement
        if line.startswith("#"):
            grounded.dropped["code"] += 1  # a comment: ``# noinspection ...``
            continue
        for sentence in _SPLIT.split(line):
            sentence = sentence.strip()
            if not sentence:
                continue
            problem = sentence_problem(sentence, known)
            key = " ".join(sentence.lower().split())
            if problem is None and key in seen:
                problem = "repeat"
            if problem is None:
                grounded.sentences.append(sentence)
                seen.add(key)
            else:
                grounded.dropped[problem] += 1
    return grounded
