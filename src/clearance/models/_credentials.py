"""Where an API provider's client points and with which key (arguments, then environment)."""

from __future__ import annotations

import os

from clearance._core.errors import ConfigError
from clearance._core.masking import mask_text, url_secrets

__all__ = ["PLACEHOLDER_API_KEY", "client_settings", "redacted"]

PLACEHOLDER_API_KEY = "unused"
"""Key sent to a server at an explicit base URL when no key is configured (the SDKs refuse to
run without one)."""


def redacted(text: str, api_key: object, base_url: str | None = None) -> str:
    """``text`` with ``api_key`` as ``[api key]`` and the credentials of URLs masked.

    A server may echo the key back (``"Incorrect API key provided: sk-..."``), or the
    password of its base URL (``http://user:password@host/v1``, sent as Basic credentials)
    or its ``?api_key=``; its error text goes into the error, the ledger and the terminal,
    so they are taken out first (`clearance._core.masking.mask_text`), with the credentials
    of any other URL the text quotes. The placeholder key and keys under
    `clearance._core.masking.MIN_SECRET_CHARS` (4) characters are left alone.
    """
    if isinstance(api_key, str) and api_key != PLACEHOLDER_API_KEY:
        text = mask_text(text, (api_key,), label="[api key]")
    return mask_text(text, url_secrets(base_url))


def client_settings(
    *, vendor: str, env_prefix: str, server: str, base_url: str | None, api_key: str | None
) -> tuple[str | None, str]:
    """The base URL and API key a provider's client is made with.

    Each comes from its argument, else ``<env_prefix>_BASE_URL`` / ``<env_prefix>_API_KEY``.
    Without a key, a server at an explicit base URL gets `PLACEHOLDER_API_KEY`.

    Args:
        vendor: The provider's name, for the error ("OpenAI").
        env_prefix: The environment variables' prefix ("OPENAI").
        server: What a base URL may point at instead, for the error.
        base_url: The base URL given, if any.
        api_key: The key given, if any.

    Returns:
        ``(base_url or None, api_key)``.

    Raises:
        ConfigError: Neither a key nor a base URL is configured, or the base URL holds a
            control character (the HTTP client would raise on it).
    """
    url = base_url or os.environ.get(f"{env_prefix}_BASE_URL") or None
    if url is not None and not url.isprintable():  # a line break, a tab, an escape...
        where = "base_url" if base_url else f"{env_prefix}_BASE_URL"
        raise ConfigError(f"{where} {url!r} holds a control character: not a URL", field="base_url")
    key = api_key or os.environ.get(f"{env_prefix}_API_KEY") or None
    if key is None:
        if url is None:
            raise ConfigError(
                f"no API key for {vendor}: set {env_prefix}_API_KEY, pass api_key=..., or point "
                f"base_url (or {env_prefix}_BASE_URL) at {server}",
                field="api_key",
            )
        key = PLACEHOLDER_API_KEY
    return url, key
