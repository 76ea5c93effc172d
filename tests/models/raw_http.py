"""A raw HTTP/1.1 server on 127.0.0.1 for the provider tests.

It speaks HTTP by hand, so a test can answer what no honest server does (a redirect
elsewhere, a body of hundreds of megabytes, a stream cut short, a gzip bomb).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

Handler = Callable[[int, socket.socket], None]  # (request number, 1-based; the connection)


class Server:
    """A raw HTTP/1.1 server: ``handler`` writes each answer's bytes itself."""

    def __init__(self, handler: Handler) -> None:
        self.heads: list[str] = []
        self.sent = 0  # bytes the handler managed to write (see `send`)
        self._handler = handler
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, rest = data.split(b"\r\n\r\n", 1)
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                 if line.lower().startswith(b"content-length:")), 0,
            )  # fmt: skip
            while len(rest) < length:
                rest += conn.recv(65536)
            self.heads.append(head.decode())
            with contextlib.suppress(OSError):  # the client hung up: the rest stays unsent
                self._handler(len(self.heads), conn)

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self._sock.close()


def answering(answer: bytes) -> Server:
    """A server answering every request with ``answer`` (the whole HTTP answer, head included)."""
    return Server(lambda number, conn: conn.sendall(answer))
