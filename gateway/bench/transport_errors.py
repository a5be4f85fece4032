"""The bench client's transport failures (it drives providers and gateways with aiohttp) in plain words."""

from __future__ import annotations

import errno

import aiohttp


def describe_transport_error(exc: BaseException, *, mid_answer: bool = False) -> str:
    """What went wrong on the wire, in words for the reader of a bench report: never aiohttp's own text.

    aiohttp's messages are its internals (``TransferEncodingError: 400, message='Not enough data
    to satisfy transfer length header.'``, where 400 is a parser code, not an HTTP status) and
    would mislead a reader; each case gets a plain sentence instead. Connection failures name
    only host, port and the OS's reason, never a key. ``mid_answer``: the response had started.
    """
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection to {exc.host}:{exc.port} failed: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientPayloadError):
        # A body cut short: chunked encoding ended without its last chunk, or fewer bytes than
        # Content-Length said. The provider (or something between) closed the connection.
        return "the provider closed the stream mid-answer"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the provider closed the connection " + ("mid-answer" if mid_answer else "before answering")
    if isinstance(exc, aiohttp.ClientOSError) and isinstance(exc.__cause__, aiohttp.ClientConnectionResetError):
        # aiohttp's writer found the connection closing: re-raised by the body task with no errno.
        return "the provider closed the connection before the request was sent"
    if isinstance(exc, ConnectionResetError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNRESET):
        return "the connection to the provider was reset" + (" mid-answer" if mid_answer else "")
    if isinstance(exc, aiohttp.ClientResponseError):
        return "the provider sent a malformed HTTP response"
    if isinstance(exc, OSError) and exc.strerror:
        return f"network error: {exc.strerror}"
    return "the stream from the provider broke mid-answer" if mid_answer else "the connection to the provider failed"
