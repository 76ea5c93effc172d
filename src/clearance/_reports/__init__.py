"""Reports of finished runs: the one a team file names, or the generic run report.

A team file names its report with ``report: step:<name>`` (one of `REPORTS`). This layer
sits above orchestration (it reads a `RunResult`) and below the CLI, which writes it.
"""

from __future__ import annotations

from collections.abc import Mapping

from clearance._core.errors import ConfigError
from clearance._reports.base import Report, ReportFunction
from clearance._reports.code_review import code_review_report
from clearance._reports.run_report import run_report
from clearance._reports.sarif import SARIF_SCHEMA, SARIF_VERSION, sarif_log

__all__ = [
    "REPORTS",
    "SARIF_SCHEMA",
    "SARIF_VERSION",
    "Report",
    "ReportFunction",
    "code_review_report",
    "report_function",
    "run_report",
    "sarif_log",
]

REPORTS: Mapping[str, ReportFunction] = {
    "code_review_report": code_review_report,
    "run_report": run_report,
}
"""The reports a team file can name, by name (``report: step:<name>``)."""


def report_function(report: str | None) -> ReportFunction:
    """The report a team file's ``report:`` names (``None``: the generic run report).

    Raises:
        ConfigError: The name is not one of `REPORTS`.
    """
    if report is None:
        return run_report
    name = report.removeprefix("step:")
    if name not in REPORTS:
        raise ConfigError(
            f"unknown report {name!r} (reports: {', '.join(sorted(REPORTS))})", field="report"
        )
    return REPORTS[name]
