"""OTLP export of a command's spans, configured from the standard OpenTelemetry variables.

With the ``otel`` extra installed, `otlp_tracing` sets up a ``TracerProvider`` that sends the
run's spans (see ``docs/telemetry.md``) over OTLP/HTTP when the environment asks for it:

- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is) or ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (``/v1/traces`` appended) is set, or ``OTEL_TRACES_EXPORTER`` names ``otlp``;
- and neither ``OTEL_TRACES_EXPORTER=none`` nor ``OTEL_SDK_DISABLED=true`` is set.

``OTEL_SERVICE_NAME`` names the service (``clearance`` if unset), ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_TIMEOUT`` and ``OTEL_BSP_*`` apply as the
SDK defines them. The spans are flushed when the command ends. Without these variables, or
when a tracer provider is already configured (``opentelemetry-instrument``), nothing is set up.

An attribute value is cut to `MAX_ATTRIBUTE_CHARS` unless ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``
or ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` says otherwise (the SDK's own default is no
limit): with content capture on (``CLEARANCE_OTEL_CAPTURE_CONTENT=1``) a span carries whole
prompts and tool results, and one export of megabytes is refused by collectors, losing the
other spans of its batch.

Source: OpenTelemetry SDK environment variables,
https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/ and
https://opentelemetry.io/docs/specs/otel/protocol/exporter/.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from clearance import ConfigError

__all__ = ["MAX_ATTRIBUTE_CHARS", "MAX_EXPORT_TIMEOUT_S", "otlp_tracing", "wants_otlp"]

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
            batch setting (``OTEL_SPAN_*_LIMIT``, ``OTEL_BSP_*``) is not a whole number.
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
    return True


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
    name = env.get("OTEL_SERVICE_NAME", "").strip() or "clearance"
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
