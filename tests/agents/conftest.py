"""Fixtures of the agents tests: the spans a test's code finished (OpenTelemetry's SDK)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

_SWITCH: Any = None


def _switch() -> Any:
    """One span processor, added to the process's provider once, that a test turns on."""
    global _SWITCH
    if _SWITCH is None:
        sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
        export = pytest.importorskip("opentelemetry.sdk.trace.export")
        in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")

        class Switch(sdk_trace.SpanProcessor):
            """Forwards finished spans to the exporter only while a test that asks runs."""

            def __init__(self) -> None:
                self.exporter = in_memory.InMemorySpanExporter()
                self.inner = export.SimpleSpanProcessor(self.exporter)
                self.on = False

            def on_end(self, span: Any) -> None:
                if self.on:
                    self.inner.on_end(span)

        _SWITCH = Switch()
    return _SWITCH


@pytest.fixture
def spans() -> Iterator[Callable[[], tuple[Any, ...]]]:
    """The spans finished during the test (the global provider is set once per process)."""
    trace = pytest.importorskip("opentelemetry.trace")
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    switch = _switch()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        trace.set_tracer_provider(sdk_trace.TracerProvider())
        provider = trace.get_tracer_provider()
    if switch not in provider._active_span_processor._span_processors:
        provider.add_span_processor(switch)
    switch.exporter.clear()
    switch.on = True
    try:
        yield switch.exporter.get_finished_spans
    finally:
        switch.on = False
        switch.exporter.clear()
