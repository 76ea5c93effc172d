"""Fixtures for the provider tests: real prompts built by the `ContextBuilder`, raw servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from raw_http import Handler, Server

from clearance._context.builder import ContextBuilder
from clearance._core.prompt import Prompt
from clearance._core.spec import Agent, Task
from clearance._state.graph import TaskGraph
from clearance._state.queue import TaskQueue

PromptFactory = Callable[..., Prompt]

WRITER = Agent(
    name="writer",
    instructions="You are a concise assistant. Answer in one short sentence.",
)
RESEARCHER = Agent(name="researcher", instructions="You collect facts.")


def build_prompt(
    count_tokens: Callable[[str], int],
    *,
    description: str = "Name the colour of a clear daytime sky.",
    upstream_result: str = "The sky is usually blue on a clear day.",
) -> Prompt:
    """A task prompt for ``writer`` whose dependency ``facts`` (by ``researcher``) completed."""
    graph = TaskGraph(
        [
            Task(
                id="facts",
                title="Collect facts",
                description="Collect facts.",
                assignee="researcher",
            ),
            Task(
                id="answer",
                title="Answer",
                description=description,
                assignee="writer",
                depends_on=("facts",),
            ),
        ]
    )
    queue = TaskQueue(graph)
    queue.start("facts")
    queue.complete("facts", upstream_result)
    builder = ContextBuilder(count_tokens=count_tokens)
    return builder.build_task_prompt(graph.get("answer"), agent=WRITER, queue=queue)


@pytest.fixture
def make_prompt() -> PromptFactory:
    """``make_prompt(count_tokens, description=..., upstream_result=...)`` -> `Prompt`."""
    return build_prompt


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    """``serve(handler) -> Server``: raw HTTP servers on 127.0.0.1, closed after the test."""
    servers: list[Server] = []

    def start(handler: Handler) -> Server:
        servers.append(Server(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
