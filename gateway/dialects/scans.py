"""The relay's per-chunk byte scans, as one C call each where the build holds them (``chat_read.c``).

Every relayed chunk is searched a few times: for the stream's ending (the meter), for an error event
and an empty ``choices`` list (the forwarder), for chat's ``finish_reason`` with a value (the meter,
until the finish), for the provider's key (the redaction). Written ``data.find(needle)`` in compiled
code, each is a method looked up by name, its arguments packed into a tuple and parsed, then the
search: most of a search's cost on a chunk of a few hundred bytes. The build's ``find`` takes its
two objects as they are and searches; chat's ``finish_reason`` pattern is searched without the regex
engine. Where the build is not used (or ``GATEWAY_NATIVE=0``) ``find`` is ``bytes.find`` itself (no
Python frame around it: called from Python it costs what ``data.find(needle)`` does) and
``chat_finish`` the pattern's search.

Written ``find(data, needle) >= 0``, not ``needle in data``: on ``bytes``, ``in`` first tries its operand
as an integer (``65 in b"A"``), which raises a ``TypeError`` and clears it before the search runs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from types import ModuleType

from gateway import native

CHAT_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"')
"""A finish_reason with a value (not null): found with a scan, so that no chunk is parsed after the first token."""


def _chat_finish(data: bytes) -> bool:
    return CHAT_FINISH_REASON.search(data) is not None


def _load() -> tuple[Callable[[bytes, bytes], int], Callable[[bytes], bool]]:
    module = native.load_c("gateway.dialects._chat_read")
    if module is None:
        return bytes.find, _chat_finish
    return module.find, module.chat_finish


find, chat_finish = _load()
"""``find(data, needle)``: ``data.find(needle)``. ``chat_finish(data)``: whether ``CHAT_FINISH_REASON`` occurs in
``data``."""


def redactor(secret: bytes | None, built: ModuleType | None = None) -> Callable[[bytes], bytes]:
    """``redact(data)``: ``data`` with every ``secret`` masked (``***``), ``data`` itself when it holds none (or there
    is no secret). Made once per provider; called on every relayed chunk. With the build (``built``: the loaded C
    module, by default the gateway's), the C ``redact`` with the secret bound by ``functools.partial``: no Python
    frame per call."""
    module = built if built is not None else native.load_c("gateway.dialects._chat_read")
    if module is not None:
        c_redact: Callable[[bytes, bytes], bytes] = module.redact
        return functools.partial(c_redact, secret or b"")

    def redact(data: bytes) -> bytes:
        if secret and data.find(secret) >= 0:
            return data.replace(secret, b"***")
        return data

    return redact


__all__ = ["CHAT_FINISH_REASON", "chat_finish", "find", "redactor"]
