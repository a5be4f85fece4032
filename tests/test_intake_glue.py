"""The request glue's fast forms give what the forms they replaced gave (request ids, the runtime of a request)."""

from __future__ import annotations

import os
import random
import uuid

import pytest
from starlette.applications import Starlette

from gateway import request_ids
from gateway.runtime import RuntimeHolder, holder_of


def _former_request_id(raw: bytes) -> str:
    """``new_request_id`` before the pool: one ``os.urandom(16)`` per id, its bits set one id at a time."""
    made = bytearray(raw)
    made[6] = made[6] & 0x0F | 0x40
    made[8] = made[8] & 0x3F | 0x80
    return made.hex()


def test_pooled_request_ids_are_the_uuid4_hex_of_each_16_bytes_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(41)
    pools = [rng.randbytes(request_ids._ID_POOL_BYTES) for _ in range(3)]
    pools[1] = b"\x00" * 8 + b"\xff" * (request_ids._ID_POOL_BYTES - 8)  # every bit pattern of the two bytes set
    drawn: list[int] = []

    def urandom(n: int) -> bytes:
        drawn.append(n)
        return pools[len(drawn) - 1]

    monkeypatch.setattr(os, "urandom", urandom)
    request_ids._ids.drop()
    ids = [request_ids.new_request_id() for _ in range(3 * request_ids._ID_POOL_BYTES // 16)]
    assert drawn == [request_ids._ID_POOL_BYTES] * 3  # one draw per 256 ids
    expected = [pool[at : at + 16] for pool in pools for at in range(0, len(pool), 16)]
    assert ids == [uuid.UUID(bytes=raw, version=4).hex for raw in expected]
    assert ids == [_former_request_id(raw) for raw in expected]
    monkeypatch.undo()
    request_ids._ids.drop()
    made = [request_ids.new_request_id() for _ in range(2000)]
    assert len(set(made)) == 2000
    assert all(len(i) == 32 and uuid.UUID(hex=i).version == 4 and uuid.UUID(hex=i).hex == i for i in made)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_ids_of_its_own() -> None:
    request_ids._ids.drop()
    request_ids.new_request_id()  # the parent's pool holds 255 more
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, "".join(request_ids.new_request_id() for _ in range(4)).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = "".join(request_ids.new_request_id() for _ in range(4))
    assert len(child) == 128
    assert child != parent  # the parent's next four ids are not the child's


def test_the_runtime_holder_is_what_state_runtime_holds() -> None:
    app = Starlette()
    with pytest.raises(AttributeError, match="'State' object has no attribute 'runtime'"):
        holder_of({"app": app})
    first, second = RuntimeHolder(), RuntimeHolder()
    app.state.runtime = first
    assert holder_of({"app": app}) is first is app.state.runtime
    app.state.runtime = second  # whatever holds it now is read, per request
    assert holder_of({"app": app}) is second
    app.state.runtime = object()
    with pytest.raises(TypeError, match="no gateway runtime"):
        holder_of({"app": app})
