"""OTLP export of a command's spans, configured from the standard OpenTelemetry variables.

With the ``otel`` extra installed, `otlp_tracing` sets up a ``TracerProvider`` that sends the
run's spans (see ``docs/telemetry.md``) over OTLP/HTTP when the environment asks for it:

- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is) or ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (``/v1/traces`` appended) is set, or ``OTEL_TRACES_EXPORTER`` names ``otlp``;
- and neither ``OTEL_TRACES_EXPORTER=none`` nor ``OTEL_SDK_DISABLED=true`` is set.

``OTEL_SERVICE_NAME`` names the service, else ``service.name`` of ``OTEL_RESOURCE_ATTRIBUTES``,
else ``clearance``. ``OTEL_RESOURCE_ATTRIBUTES`` is checked (`resource_attributes`: the
specification's comma-separated ``key=value`` list, keys tokens, values percent-encoded
UTF-8, as in W3C Baggage). It, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_TIMEOUT``
and ``OTEL_BSP_*`` apply as the SDK defines them. An endpoint with a query string is refused:
the exporter's retry line shows it, so a token there would reach the logs (a token goes in
``OTEL_EXPORTER_OTLP_HEADERS``). The spans are flushed when the command ends. Without these
variables, or when a tracer provider is already configured (``opentelemetry-instrument``),
nothing is set up.

An attribute value is cut to `MAX_ATTRIBUTE_CHARS` unless ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``
or ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` says otherwise (the SDK's own default is no
limit): with content capture on (``CLEARANCE_OTEL_CAPTURE_CONTENT=1``) a span carries whole
prompts and tool results, and one export of megabytes is refused by collectors, losing the
other spans of its batch.

Source: OpenTelemetry SDK environment variables,
https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/,
https://opentelemetry.io/docs/specs/otel/protocol/exporter/,
https://opentelemetry.io/docs/specs/otel/resource/sdk/ (``OTEL_RESOURCE_ATTRIBUTES``) and
https://www.w3.org/TR/baggage/ (its key and value grammar).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

from clearance import ConfigError

__all__ = [
    "MAX_ATTRIBUTE_CHARS",
    "MAX_EXPORT_TIMEOUT_S",
    "MAX_RESOURCE_ATTRIBUTES",
    "MAX_RESOURCE_CHARS",
    "otlp_tracing",
    "resource_attributes",
    "wants_otlp",
]

MAX_ATTRIBUTE_CHARS = 16_384
"""Longest span attribute value exported, in characters, unless the variables set one."""
_LENGTH_LIMITS = ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"
_CAPTURE = "CLEARANCE_OTEL_CAPTURE_CONTENT"  # read by the spans: 1, true or yes turn it on
MAX_EXPORT_TIMEOUT_S = 300.0
"""Longest ``OTEL_EXPORTER_OTLP_TIMEOUT`` accepted, in seconds (the exit waits that long)."""
# A header entry as the SDK's exporter reads it (liberally: a value may hold spaces).
_HEADER = re.compile(
    r"[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*=[ \t]*"
    r"[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"
)
_HEADER_DELIMITER = re.compile(r"[ \t]*,[ \t]*")
MAX_RESOURCE_ATTRIBUTES = 128
"""Most ``OTEL_RESOURCE_ATTRIBUTES`` entries accepted (the SDK's default attribute count)."""
MAX_RESOURCE_CHARS = 8192
"""Longest ``OTEL_RESOURCE_ATTRIBUTES`` or ``OTEL_SERVICE_NAME`` accepted, in characters (W3C
Baggage's limit): the resource is sent with every export."""
_RESOURCE = "OTEL_RESOURCE_ATTRIBUTES"
_RESOURCE_FORMAT = (
    "a comma-separated list of key=value, values percent-encoded; the value is not shown"
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 7230 token: a W3C Baggage key
_BAGGAGE_OCTETS = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")  # a value
_ESCAPES = re.compile(r"(?:[^%]|%[0-9A-Fa-f]{2})*")
_CERTIFICATES = tuple(
    f"OTEL_EXPORTER_OTLP_{signal}{file}"
    for signal in ("TRACES_", "")
    for file in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
)
# The SDK's whole-number variables and their least value: a span limit that is not one fails
# the provider with a traceback; a batch setting that is not one is logged with a traceback.
_WHOLE_NUMBERS = {
    **dict.fromkeys(
        (
            *_LENGTH_LIMITS,
            "OTEL_ATTRIBUTE_COUNT_LIMIT",
            "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
            "OTEL_SPAN_EVENT_COUNT_LIMIT",
            "OTEL_SPAN_LINK_COUNT_LIMIT",
            "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
            "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
        ),
        0,
    ),
    **dict.fromkeys(
        (
            "OTEL_BSP_SCHEDULE_DELAY",
            "OTEL_BSP_EXPORT_TIMEOUT",
            "OTEL_BSP_MAX_QUEUE_SIZE",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        ),
        1,
    ),
}


def wants_otlp(environ: Mapping[str, str]) -> bool:
    """Whether the variables ask for OTLP export of traces (see the module docstring).

    Raises:
        ConfigError: An endpoint is not an ``http``/``https`` URL with a host,
            ``OTEL_TRACES_EXPORTER`` names an exporter other than ``otlp``/``none``, or the
            protocol is not ``http/protobuf`` (the installed exporter), or a span limit or
            batch setting (``OTEL_SPAN_*_LIMIT``, ``OTEL_BSP_*``) is not a whole number, or an
            endpoint has a query string or fragment (the exporter's log lines show it), or
            ``OTEL_RESOURCE_ATTRIBUTES`` or ``OTEL_SERVICE_NAME`` is malformed
            (`resource_attributes`).
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {
        e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()
    }
    if "none" in exporters:
        return False
    unknown = exporters - {"otlp"}
    if unknown:
        raise ConfigError(
            f"trace exporter {sorted(unknown)[0]!r} is not supported by the clearance command "
            "(use otlp or none)",
            field="OTEL_TRACES_EXPORTER",
        )
    endpoints = [name for name in _ENDPOINTS if environ.get(name, "").strip()]
    if not endpoints and not exporters:
        return False
    for name in endpoints:
        parts = urlsplit(environ[name].strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:  # not shown: it may
            raise ConfigError("is not an http(s) URL with a host", field=name)  # hold a token
        if parts.query or parts.fragment:  # the exporter's retry line shows the query
            raise ConfigError(
                "has a query string or fragment, which the exporter shows in its log lines: "
                "give a token in OTEL_EXPORTER_OTLP_HEADERS (name=value), not in the URL "
                "(the value is not shown)",
                field=name,
            )
    for name in _PROTOCOLS:
        protocol = environ.get(name, "").strip()
        if protocol and protocol != "http/protobuf":
            raise ConfigError(
                f"protocol {protocol!r} is not supported: the clearance command exports "
                "http/protobuf",
                field=name,
            )
    for name, least in _WHOLE_NUMBERS.items():
        text = environ.get(name, "").strip()
        if not text:
            continue
        if not (text.isascii() and text.isdigit() and int(text) >= least):
            raise ConfigError(f"must be a whole number from {least}, got {text!r}", field=name)
    _check_exporter_variables(environ)
    resource_attributes(environ)
    return True


def resource_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` decoded, once checked; ``OTEL_SERVICE_NAME`` checked.

    The format is the specification's (W3C Baggage without properties): ``key=value``
    entries separated by commas, spaces and tabs around each ignored, each key a token, each
    value of baggage octets with the others percent-encoded, decoding to UTF-8. The SDK
    drops or mangles what is not (with a warning that shows the entry), so a service name
    or a deployment tag would be lost without a word. No value is shown in an error.

    Returns:
        Each key's decoded value (empty when the variable is empty or unset).

    Raises:
        ConfigError: An entry is empty, not ``key=value``, has a key that is not a token or a
            value with a character that must be percent-encoded, a ``%`` that starts no
            escape, or escapes that are not UTF-8; two entries give the same key; there are
            over `MAX_RESOURCE_ATTRIBUTES` entries or `MAX_RESOURCE_CHARS` characters; or
            ``OTEL_SERVICE_NAME`` is not printable text of at most `MAX_RESOURCE_CHARS`.
    """
    name = environ.get("OTEL_SERVICE_NAME", "")
    if len(name) > MAX_RESOURCE_CHARS or not name.isprintable():  # a lone surrogate: not UTF-8
        raise ConfigError(
            f"must be printable text of at most {MAX_RESOURCE_CHARS:,} characters "
            "(the value is not shown)",
            field="OTEL_SERVICE_NAME",
        )
    text = environ.get(_RESOURCE, "")
    if not text:
        return {}
    if text.count(",") >= MAX_RESOURCE_ATTRIBUTES:
        raise ConfigError(
            f"has {text.count(',') + 1:,} entries, over the {MAX_RESOURCE_ATTRIBUTES} accepted",
            field=_RESOURCE,
        )
    if len(text) > MAX_RESOURCE_CHARS:
        raise ConfigError(
            f"is {len(text):,} characters, over the {MAX_RESOURCE_CHARS:,} accepted "
            "(the value is not shown)",
            field=_RESOURCE,
        )
    entries = text.split(",")
    found: dict[str, str] = {}
    where: dict[str, int] = {}
    for n, entry in enumerate(entries, 1):
        key, value = _resource_entry(n, entry)
        if key in where:
            raise ConfigError(
                f"entries {where[key]} and {n} give the same key (the value is not shown)",
                field=_RESOURCE,
            )
        where[key], found[key] = n, value
    return found


def _resource_entry(n: int, entry: str) -> tuple[str, str]:
    """Entry ``n`` of ``OTEL_RESOURCE_ATTRIBUTES`` as its key and decoded value.

    Raises:
        ConfigError: As `resource_attributes`, naming the entry by its number.
    """

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"entry {n}{why}", field=_RESOURCE)

    if not entry.strip(" \t"):
        raise refuse(f" is empty ({_RESOURCE_FORMAT})")
    key, equals, raw = entry.partition("=")
    key, raw = key.strip(" \t"), raw.strip(" \t")
    if not equals:
        raise refuse(f" is not key=value ({_RESOURCE_FORMAT})")
    if not key:
        raise refuse(f" has no key ({_RESOURCE_FORMAT})")
    if not _TOKEN.fullmatch(key):
        raise refuse(
            ": the key is not a token (letters, digits and !#$%&'*+-.^_`|~; the value is not shown)"
        )
    if not _BAGGAGE_OCTETS.fullmatch(raw):
        raise refuse(
            ": the value holds a character that must be percent-encoded (a space, double "
            "quote, comma, semicolon, backslash, control or non-ASCII character; the value "
            "is not shown)"
        )
    if not _ESCAPES.fullmatch(raw):
        raise refuse(
            ": the value holds a % that starts no percent-escape (%XX, two hex digits; %25 "
            "for %; the value is not shown)"
        )
    try:
        return key, unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise refuse(": the value's percent-escapes are not UTF-8 text") from None


def _check_exporter_variables(environ: Mapping[str, str]) -> None:
    """Refuse exporter settings the SDK would drop with a log line, or that would hang the exit.

    The SDK falls back to 10 seconds for a timeout that is not a number, and to no
    compression for an unknown one; it drops a header that is not ``name=value``, logging
    the entry (which may hold a token); a timeout of days holds the command's exit that long
    when the collector does not answer; a certificate file that is missing fails every
    export; a content-capture switch that reads as neither on nor off is off. None of the
    values is shown but the timeout, the compression and the switch.
    """
    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        text = environ.get(name, "").strip()
        if text:
            try:
                seconds = float(text)
            except ValueError:
                seconds = math.nan
            if not 0 < seconds <= MAX_EXPORT_TIMEOUT_S:  # NaN fails too
                most = f"{MAX_EXPORT_TIMEOUT_S:g}"
                raise ConfigError(
                    f"must be a number of seconds above 0 and at most {most}, got {text!r:.40}",
                    field=name,
                )
    for name in ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"):
        text = environ.get(name, "").strip().lower()
        if text and text not in ("gzip", "deflate", "none"):
            raise ConfigError(f"must be gzip, deflate or none, got {text!r:.40}", field=name)
    for name in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        entries = _HEADER_DELIMITER.split(environ.get(name, ""))
        for n, entry in enumerate(entries, 1):
            if entry.strip() and not _HEADER.fullmatch(entry.strip()):
                raise ConfigError(f"entry {n} is not name=value (a comma-separated list of "
                                  "name=value; the value is not shown)", field=name)  # fmt: skip
    capture = environ.get(_CAPTURE, "").strip().lower()
    if capture not in ("", "1", "true", "yes", "0", "false", "no"):
        raise ConfigError(f"must be 1 (true, yes) or 0 (false, no), got {capture!r:.40}",
                          field=_CAPTURE)  # fmt: skip
    for name in _CERTIFICATES:
        path = environ.get(name, "")
        if path and not os.path.isfile(path):
            raise ConfigError(f"{path!r:.200} is not a file", field=name)


def _check_provider_variable(environ: Mapping[str, str]) -> None:
    """Refuse ``OTEL_PYTHON_TRACER_PROVIDER`` naming no installed tracer provider.

    OpenTelemetry would log a traceback and fail the first ``get_tracer_provider``.
    """
    from importlib.metadata import entry_points

    name = environ.get(_PROVIDER)
    if name is not None and not entry_points(group="opentelemetry_tracer_provider", name=name):
        raise ConfigError(
            f"no installed tracer provider is named {name!r} (the SDK's is sdk_tracer_provider)",
            field=_PROVIDER,
        )


@contextmanager
def otlp_tracing() -> Iterator[Any]:
    """Export the command's spans over OTLP/HTTP while the block runs, when asked to.

    The variables are read from ``os.environ``.

    Yields:
        The ``TracerProvider`` set up (its spans are flushed and it is shut down when the
        block ends, also on an error), or ``None`` when nothing was set up: no OTLP
        variables, OpenTelemetry not installed, or a provider already configured.

    Raises:
        ConfigError: As `wants_otlp`; or the variables ask for OTLP export and the ``otel``
            extra is not installed.
    """
    env = os.environ
    if not wants_otlp(env):
        yield None
        return
    unset = "opentelemetry.trace" not in sys.modules  # so no provider is set yet
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import SpanLimits, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(
            "OTLP export needs OpenTelemetry: pip install 'clearance[otel]'",
            field="OTEL_EXPORTER_OTLP_ENDPOINT",
        ) from None
    if unset:
        _check_provider_variable(env)
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        yield None  # configured already (opentelemetry-instrument, or the caller)
        return
    attributes = resource_attributes(env)  # checked by wants_otlp
    name = env.get("OTEL_SERVICE_NAME", "").strip() or attributes.get(SERVICE_NAME) or "clearance"
    chosen = any(env.get(limit, "").strip() for limit in _LENGTH_LIMITS)
    limits = SpanLimits() if chosen else SpanLimits(max_span_attribute_length=MAX_ATTRIBUTE_CHARS)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}), span_limits=limits)
    try:
        processor = BatchSpanProcessor(OTLPSpanExporter())
    except ValueError as exc:  # the batch over the queue: the whole numbers are checked
        raise ConfigError(
            f"must be at most OTEL_BSP_MAX_QUEUE_SIZE (the SDK says: {exc})",
            field="OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        ) from None
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    try:
        yield provider
    finally:
        provider.shutdown()
