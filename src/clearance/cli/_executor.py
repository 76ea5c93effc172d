"""The ``--executor`` options of ``clearance run`` and ``clearance resume``."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from clearance import ConfigError
from clearance.runs import ExecutorKind

if TYPE_CHECKING:
    from clearance.runs import ExecutorSpec


__all__ = [
    "ExecutorName",
    "ExecutorOption",
    "RayAddressOption",
    "RayEnvOption",
    "RayWorkersOption",
    "executor_spec",
]


class ExecutorName(StrEnum):
    """Where model calls are answered."""

    local = "local"
    ray = "ray"


ExecutorOption = Annotated[
    ExecutorName | None,
    typer.Option(
        "--executor",
        help="Where model calls are answered: local (this process) or ray (Ray worker "
        "actors; prompts are still built here); default: the team file's (or the run's) "
        "executor. See docs/ray.md.",
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


def executor_spec(
    current: ExecutorSpec,
    name: ExecutorName | None,
    address: str | None,
    workers: int | None,
    env: list[str] | None,
) -> ExecutorSpec:
    """The run's ``executor:`` with the ``--executor`` options applied.

    ``--executor`` replaces the spec's executor with the one the options describe; Ray
    options alone change the spec's Ray executor.

    Raises:
        ConfigError: Ray options without ``--executor ray``, a ``--ray-env`` variable
            that is not set, or a value the team file's ``executor:`` would refuse (an
            empty address, more than 64 ``--ray-env`` names), naming the option.
    """
    from pydantic import ValidationError

    from clearance.runs import ExecutorSpec

    if name is None and not any(v is not None for v in (address, workers, env)):
        return current
    kind = ExecutorKind(name.value) if name is not None else current.kind
    if kind == ExecutorKind.LOCAL:
        given = (("--ray-address", address), ("--ray-workers", workers), ("--ray-env", env))
        for flag, value in given:
            if value is not None:
                raise ConfigError("needs --executor ray", field=flag)
        return ExecutorSpec()
    for key in env or ():
        if key not in os.environ:
            raise ConfigError(f"{key!r} is not set in this environment", field="--ray-env")
    # ``--executor ray`` says where calls go in full; other options adjust the spec's.
    ray = ExecutorKind.RAY
    chosen = current if name is None and current.kind == ray else ExecutorSpec(kind=ray)
    update: dict[str, object] = {}
    for key, value in (("address", address), ("workers", workers), ("env", env)):
        if value is not None:
            update[key] = value
    # Checked as the team file's ``executor:`` is (``model_copy`` checks nothing), so the
    # run's recorded spec reads back on resume.
    try:
        return ExecutorSpec.model_validate({**chosen.model_dump(), **update})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else "executor"
        raise ConfigError(error["msg"], field=_FLAGS.get(key, "executor")) from None


_FLAGS = {"address": "--ray-address", "workers": "--ray-workers", "env": "--ray-env"}
