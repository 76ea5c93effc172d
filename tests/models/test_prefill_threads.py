"""Prefill threads of the embedded model follow the machine's load."""

from __future__ import annotations


def test_prefill_threads_leave_a_busy_machine_gently(monkeypatch):
    from clearance.models import _llama_cpp

    monkeypatch.setattr(_llama_cpp.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_llama_cpp.os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    assert _llama_cpp.prefill_threads() == 2  # idle: every CPU
    monkeypatch.setattr(_llama_cpp.os, "getloadavg", lambda: (1.4, 1.0, 1.0))
    assert _llama_cpp.prefill_threads() == 1
    monkeypatch.setattr(_llama_cpp.os, "getloadavg", lambda: (9.8, 9.0, 6.0))
    assert _llama_cpp.prefill_threads() == 1  # never fewer than one
