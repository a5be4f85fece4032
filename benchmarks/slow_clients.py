"""Slow and idle clients against a running gateway: how long each kind holds its socket, and what a
well-behaved streaming client's first token does meanwhile.

Opens ``--sockets`` connections of each kind (a head sent one byte a second; a body declared and never
finished; a connection that says nothing; a request answered, then the connection left idle), watches
each until the server closes it or ``--limit`` seconds pass, and streams ``--streams`` chat requests
(one at a time, through the OpenAI SDK) while they are held, against as many streamed before. Loopback
only, bounded in count and time. Run it against ``gateway demo`` (any tree)::

    gateway demo --port 18080 --traffic 0 &
    python -m benchmarks.slow_clients --url http://127.0.0.1:18080 --model glm-5.3-flash
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from urllib.parse import urlsplit

import openai

KINDS = ("slow head", "stalled body", "silent", "idle kept-alive")


def _hold(host: str, port: int, kind: str, limit_s: float, out: list[float]) -> None:
    started = time.monotonic()
    try:
        sock = socket.create_connection((host, port), timeout=limit_s)
    except OSError:
        out.append(0.0)
        return
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n"
    sent = 0
    with sock:
        sock.settimeout(1.0)
        if kind == "stalled body":
            sock.sendall(head + b'{"model": ')
        elif kind == "idle kept-alive":
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        while time.monotonic() - started < limit_s:
            try:
                data = sock.recv(65536)
                if not data:
                    break
            except TimeoutError:
                if kind == "slow head" and sent < len(head):
                    try:
                        sock.sendall(head[sent : sent + 1])
                    except OSError:
                        break
                    sent += 1
            except OSError:
                break
    out.append(time.monotonic() - started)


def _first_tokens(base_url: str, model: str, count: int) -> list[float]:
    waits = []
    with openai.OpenAI(base_url=base_url + "/v1", api_key="bench", max_retries=0) as client:
        for _ in range(count):
            started = time.monotonic()
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=16
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    waits.append(time.monotonic() - started)
                    break
            stream.close()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--sockets", type=int, default=50, help="connections of each kind (default: 50)")
    parser.add_argument("--limit", type=float, default=40.0, help="watch each for at most this long (default: 40)")
    parser.add_argument("--streams", type=int, default=20)
    args = parser.parse_args()
    parts = urlsplit(args.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    before = _first_tokens(args.url, args.model, args.streams)
    held: dict[str, list[float]] = {kind: [] for kind in KINDS}
    threads = [
        threading.Thread(target=_hold, args=(host, port, kind, args.limit, held[kind]), daemon=True)
        for kind in KINDS
        for _ in range(args.sockets)
    ]
    for thread in threads:
        thread.start()
    during = _first_tokens(args.url, args.model, args.streams)
    for thread in threads:
        thread.join(args.limit + 5)

    print(f"{args.sockets} sockets of each kind, watched for up to {args.limit:g} s")
    print(f"{'kind':<18} {'closed by server':>16} {'p50 s':>7} {'max s':>7}")
    for kind, seconds in held.items():
        cut = sum(1 for s in seconds if s < args.limit - 0.5)
        print(f"{kind:<18} {cut:>10}/{len(seconds):<5} {statistics.median(seconds):>7.1f} {max(seconds):>7.1f}")
    print(
        f"first token, {args.streams} streams one at a time: p50 {statistics.median(before) * 1000:.0f} ms before, "
        f"{statistics.median(during) * 1000:.0f} ms while held (max {max(before) * 1000:.0f} / "
        f"{max(during) * 1000:.0f} ms)"
    )


if __name__ == "__main__":
    main()
