"""An upstream that misbehaves below HTTP: it resets connections, never answers, or cuts a stream mid-event.

Why: the fake provider runs under uvicorn, which always speaks correct HTTP; some faults of real
providers (a load balancer resetting a connection before any header, a server that accepts and
then says nothing, a stream cut in the middle of an event) can only be staged on a raw socket.
Each accepted connection has its request read in full, then gets what the mode says:

- ``reset``: an RST (SO_LINGER 0) before any response byte;
- ``silent``: nothing, the connection held open until ``stop``;
- ``script``: the given bytes (status line, headers, part of a body), then an RST;
- ``stale``: the given bytes (a whole keep-alive response), then the connection's next request is read
  and the connection closed without an answer: a kept-alive connection the server closed as it was reused;
- ``stale-reset``: as ``stale``, but the reused connection is reset (an RST, SO_LINGER 0) as its request arrives;
- ``endless``: the given bytes, then ``filler`` again and again until the client drops the connection (an answer,
  a header block or an event that never ends), for at most ``ENDLESS_S`` and ``ENDLESS_BYTES``.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Literal

Mode = Literal["reset", "silent", "script", "stale", "stale-reset", "endless"]
ENDLESS_S = 30.0
ENDLESS_BYTES = 1 << 30


class RawUpstream:
    """A loopback TCP server on a free port; ``connections`` counts the requests it has read."""

    def __init__(self, mode: Mode, script: bytes = b"", name: str = "raw", filler: bytes = b"") -> None:
        self.name = name
        """Its provider name in a config."""
        self.mode = mode
        self.script = script
        self.filler = filler
        self.connections = 0
        self.sent = 0
        """Bytes of ``filler`` the last ``endless`` connection took before the client dropped it."""
        self._held: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"raw-upstream-{self.port}", daemon=True)

    def start(self) -> RawUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._listener.close()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(2.0)
            try:
                _read_request(conn)
            except OSError:
                conn.close()
                continue
            self.connections += 1
            if self.mode == "silent":
                self._held.append(conn)
                continue
            if self.mode in ("stale", "stale-reset"):
                conn.sendall(self.script)
                try:
                    _read_request(conn)  # the reuse: read, and never answered
                    self.connections += 1
                except OSError:
                    pass
                if self.mode == "stale-reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                continue
            if self.mode == "script":
                conn.sendall(self.script)
            if self.mode == "endless":
                self._endless(conn)
            # SO_LINGER with a zero timeout: close() sends an RST instead of a FIN.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def _endless(self, conn: socket.socket) -> None:
        """The script, then the filler until the client drops the connection, the stop, or the bounds."""
        self.sent = 0
        deadline = time.monotonic() + ENDLESS_S
        try:
            conn.sendall(self.script)
            while self.sent < ENDLESS_BYTES and time.monotonic() < deadline and not self._stopping.is_set():
                conn.sendall(self.filler)
                self.sent += len(self.filler)
        except OSError:
            pass  # the client dropped the connection: what the test waits for


def _read_request(conn: socket.socket) -> None:
    """Read one HTTP request (headers, and a body of Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            raise ConnectionError("client closed before its request was complete")
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            raise ConnectionError("client closed before its body was complete")
        body += piece
