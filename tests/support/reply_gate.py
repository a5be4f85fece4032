"""A loopback TCP relay in front of a server whose answers it can hold back: requests pass at once.

Why: a call that reached its server and ran there, but whose answer has not come back yet, is the moment a
client may stop waiting (it hung up, or its timeout fired) while the server has done the work all the same.
A real Redis behind this relay, its replies held, makes that moment last as long as a test needs, with no
sleep: the test sees the call's effect on the server directly, acts, then lets the replies go.
"""

from __future__ import annotations

import socket
import threading


class ReplyGate:
    """Relays ``127.0.0.1:<port>`` to ``upstream_port``; ``hold()`` keeps the upstream's bytes back until
    ``release()``. ``url`` is a Redis URL for the relay. Started by ``start``, ended by ``stop``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._open = threading.Event()
        self._open.set()
        self._stopped = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> ReplyGate:
        threading.Thread(target=self._accept, name=f"reply-gate-{self.port}", daemon=True).start()
        return self

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self._stopped = True
        self._open.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()  # the server is gone: so is this connection
                continue
            with self._lock:
                if self._stopped:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, gated: bool) -> None:
        try:
            while data := source.recv(65536):
                if gated:
                    self._open.wait()
                target.sendall(data)
        except OSError:
            pass  # either side closed: end both
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
