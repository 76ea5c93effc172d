"""The ``--executor`` options of ``clearance run`` and ``clearance resume``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated

import typer

from clearance._core.errors import ConfigError
from clearance._orchestration.executor import ModelExecutor
from clearance._orchestration.ray_executor import RayExecutor

__all__ = [
    "ExecutorName",
    "ExecutorOption",
    "RayAddressOption",
    "RayEnvOption",
    "RayWorkersOption",
    "executor",
]


class ExecutorName(StrEnum):
    """Where model calls are answered."""

    local = "local"
    ray = "ray"


ExecutorOption = Annotated[
    ExecutorName,
    typer.Option(
        "--executor",
        help="Where model calls are answered: local (this process) or ray (Ray worker "
        "actors; prompts are still built here). See docs/ray.md.",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Ray cluster to use with --executor ray ('auto', 'host:6379', "
        "'ray://host:10001'); default: start a local cluster on 127.0.0.1.",
    ),
]
RayWorkersOption = Annotated[
    int | None,
    typer.Option(
        "--ray-workers",
        min=1,
        max=256,
        help="Ray worker actors with --executor ray (default 2); each makes its own models.",
    ),
]

RayEnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--ray-env",
        help="Name of an environment variable to set in the Ray workers to its value here "
        "(an API key, a base URL; repeatable). Its value crosses the network.",
    ),
]


@contextlib.contextmanager
def executor(
    name: ExecutorName, *, address: str | None, workers: int | None, env: list[str] | None = None
) -> Iterator[ModelExecutor | None]:
    """The executor ``--executor`` names, started; stopped on exit (``None`` for local).

    Raises:
        ConfigError: Ray options without ``--executor ray``; a ``--ray-env`` variable is not
            set; Ray is missing, unreachable, or its workers did not start.
    """
    if name is ExecutorName.local:
        given = (("--ray-address", address), ("--ray-workers", workers), ("--ray-env", env))
        for flag, value in given:
            if value is not None:
                raise ConfigError("needs --executor ray", field=flag)
        yield None
        return
    forwarded = {}
    for key in env or ():
        if key not in os.environ:
            raise ConfigError(f"{key!r} is not set in this environment", field="--ray-env")
        forwarded[key] = os.environ[key]
    with RayExecutor(address=address, workers=workers or 2, worker_env=forwarded) as ray_executor:
        yield ray_executor
