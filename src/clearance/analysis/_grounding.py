"""Grounding: a model's sentence reaches a report only if everything it names is real.

A sentence fails when it holds code (a fenced or indented block, a line of source, a
comment), a rule code that is not one of the findings (``S102.5``), a name written as code
(``snake_case``, ``CamelCase``, ``dotted.name``, ``call()``, anything in backticks, a
``.py`` file) that is not a module or symbol of the package, a count (lines, functions,
findings, complexity, fan-in) that is not the named module's or function's, when it speaks
of the prompt rather than the code ("this task", "the brief"), when it does not end (cut
off mid-sentence), or when it repeats a sentence already kept. What fails is left out and
counted, never printed with a warning.
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

__all__ = ["Grounded", "Known", "ground", "sentence_problem"]

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
_CALL = re.compile(r"\b[A-Za-z_]\w*\([^)\s][^)]*\)")
_MIN_WORDS = 3
"""Fewer words than this is a fragment ("Module types."), not a statement."""
_COUNT = re.compile(
    r"\b(\d+) (?:lines?|functions?|findings?|modules?)\b|\bcomplexity (?:of )?(\d+)\b"
    r"|\bline (\d+)\b|\bimported by (\d+)\b"
)
_FILE = re.compile(r"[\w/.-]*\w\.py\b")
_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_HEADING = re.compile(r"^#{1,6} +[A-Z][a-z]+(?: [A-Za-z-]+)*:?$")
_ALLOWED = frozenset(dir(builtins)) | frozenset(keyword.kwlist)


@dataclass(frozen=True, kw_only=True, slots=True)
class Known:
    """What a report may name: the package's modules, symbols and findings.

    Attributes:
        modules: Module paths (``decoder.py``), slugs (``decoder``) and the package name.
        symbols: Function, method, class and public names, full and last part.
        codes: Rule codes ruff reported.
        numbers: The counts a sentence may state about each module or symbol (its lines,
            functions, findings, fan-in; a function's line, length and complexity).
    """

    modules: frozenset[str]
    symbols: frozenset[str]
    codes: frozenset[str]
    numbers: Mapping[str, frozenset[int]] = field(default_factory=dict)

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
        ``"code"``, ``"rule code"``, ``"name"``, ``"number"``, ``"about the prompt"``,
        ``"incomplete"`` (no final ``.``, ``!`` or ``?``), or ``None`` when it passes.
    """
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
    if _CALL.search(plain):
        return "code"  # a call with arguments: ``bool("")``
    for file_name in _FILE.findall(plain):
        if not known.names(file_name):
            return "name"
    plain = _FILE.sub(" ", plain)
    for token in _TOKEN.findall(plain):
        if _code_like(token) and not known.names(token):
            return "name"
    return _number_problem(sentence, known)


def _number_problem(sentence: str, known: Known) -> str | None:
    """``"number"`` when a count the sentence states is not one of the named things'."""
    stated = [int(n) for groups in _COUNT.findall(sentence) for n in groups if n]
    if not stated or not known.numbers:
        return None
    named = [
        name for name in known.numbers
        if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", sentence)
    ]  # fmt: skip
    allowed: set[int] = set()
    for name in named or known.numbers:
        allowed |= known.numbers[name]
    return None if all(n in allowed for n in stated) else "number"


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
