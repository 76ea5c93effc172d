"""A TCP proxy on 127.0.0.1 that can be told to freeze: it stops forwarding, closes nothing.

Stands for a PostgreSQL server whose backend stopped answering (SIGSTOP), or a network path
that drops every packet once the connection is made: the client's kernel still sees the
connection open, so only a deadline of the client's own can end its wait.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FreezingProxy", "freezing_proxy"]


class FreezingProxy:
    """Forwards every connection to ``target``; `freeze` stops forwarding, `thaw` resumes."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port: int = self._server.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._stop.set()
        self._flowing.set()
        for thread in self._threads:
            thread.join(5)
        for sock in self._sockets:
            sock.close()
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client = self._server.accept()[0]
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._admits():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while not self._stop.is_set():
            self._flowing.wait()
            try:
                ready = select.select([source], [], [], 0.1)[0]
                if not ready:
                    continue
                if not self._flowing.is_set():
                    continue  # frozen since: leave the bytes where they are
                data = source.recv(65536)
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                if not self._passes(data, source, sink):
                    return
                sink.sendall(data)
            except OSError:
                return

    def _admits(self) -> bool:
        """Whether a new connection is forwarded (a subclass may refuse some)."""
        return True

    def _passes(self, data: bytes, source: socket.socket, sink: socket.socket) -> bool:
        """Whether ``data`` read from ``source`` goes on to ``sink`` (else the pipe ends)."""
        return True


@contextmanager
def freezing_proxy(url: str) -> Iterator[tuple[FreezingProxy, str]]:
    """A proxy in front of the PostgreSQL server of ``url``, and the URL through it."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    proxy = FreezingProxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    try:
        yield proxy, parsed.set(port=proxy.port).render_as_string(hide_password=False)
    finally:
        proxy.close()
