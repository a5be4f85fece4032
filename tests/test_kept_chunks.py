"""The meter's kept chunks give back exactly what was kept, in order, however their heads were learnt and split."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.kept_chunks import MIN_HEAD, KeptChunks, shared_length

HEADS = [b'data: {"id": "c-1", "object": "chat.completion.chunk", "choices": [{"delta": {"content": "', b"data: {"]


@st.composite
def entries(draw: st.DrawFn) -> list[tuple[bytes, bool]]:
    pieces = st.binary(max_size=12) | st.sampled_from([b"", b"x", b' w"}]}\n\n'])
    return draw(
        st.lists(
            st.tuples(st.sampled_from(HEADS + [b""]), pieces, st.booleans()).map(lambda e: (e[0] + e[1], e[2])),
            max_size=40,
        )
    )


@given(entries(), st.lists(st.integers(0, 40), max_size=4))
def test_every_entry_comes_back_as_kept(kept: list[tuple[bytes, bool]], splits: list[int]) -> None:
    chunks = KeptChunks()
    for index, (data, whole) in enumerate(kept):
        chunks.append(float(index), data, whole)
    taken: list[tuple[float, bytes, bool]] = []
    for keep in splits:
        taken += list(chunks.split(keep))
    taken += list(chunks)
    assert taken == [(float(index), data, whole) for index, (data, whole) in enumerate(kept)]


def test_a_shared_beginning_is_held_once() -> None:
    chunks = KeptChunks()
    events = [HEADS[0] + f'{word}"}}]}}\n\n'.encode() for word in ("a", "b", "c")]
    for at, event in enumerate(events):
        chunks.append(float(at), event, True)
    assert len(chunks.head) >= MIN_HEAD and chunks.heads[1] is chunks.heads[2] is chunks.head
    assert chunks.full(0, 3) == events


@given(st.binary(max_size=50), st.binary(max_size=50))
def test_shared_length(a: bytes, b: bytes) -> None:
    n = shared_length(a, b)
    assert a[:n] == b[:n] and (n == min(len(a), len(b)) or a[n] != b[n])


@given(entries(), st.lists(st.integers(0, 40), max_size=6))
def test_arrivals_follow_their_entries_across_splits(kept: list[tuple[bytes, bool]], splits: list[int]) -> None:
    """``arrive`` (the bound ``times.append`` the meter notes each arrival through) writes to the entries' own
    ``times`` after every ``split``, as the meter appends and folds in turn; the part taken out is bound to its own."""
    chunks = KeptChunks()
    taken: list[tuple[float, bytes, bool]] = []
    cuts = iter(splits)
    for index, (data, whole) in enumerate(kept):
        if index % 7 == 6 and (keep := next(cuts, None)) is not None:
            older = chunks.split(keep)
            assert older.arrive.__self__ is older.times and chunks.arrive.__self__ is chunks.times  # type: ignore[attr-defined]
            taken += list(older)
        chunks.append(float(index), data, whole)  # its arrival through ``arrive``
    taken += list(chunks)
    assert taken == [(float(index), data, whole) for index, (data, whole) in enumerate(kept)]
