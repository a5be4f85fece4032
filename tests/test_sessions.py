"""Session identity: headers first, then ``prompt_cache_key``, then a fingerprint of the stable prefix."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sessions.identity import DEFAULT_SESSION_HEADERS, SessionId, session_of, stable_prefix

LONG = "x" * 5000  # about 1,250 tokens: long enough to be cached


def conversation(system: str, first: str, *later: str, tools: list[Any] | None = None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    for index, text in enumerate(later):
        messages.append({"role": "assistant" if index % 2 == 0 else "user", "content": text})
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if tools is not None:
        body["tools"] = tools
    return body


def identify(body: dict[str, Any], headers: list[tuple[str, str]] | None = None, scope: str = "k1") -> SessionId | None:
    size = len(json.dumps(body))
    return session_of(headers or [], body, model="m", scope=scope, body_bytes=size)


def test_a_session_header_wins_over_everything() -> None:
    body = {**conversation(LONG, "hi"), "prompt_cache_key": "pck"}
    found = identify(body, [("x-session-id", "abc")])
    assert found is not None and found.source == "header"
    assert identify(body, [("x-session-id", "abc")]) == found
    assert identify(body, [("x-session-id", "abd")]) != found


def test_each_coding_agents_header_is_a_session() -> None:
    for name in DEFAULT_SESSION_HEADERS:
        found = identify({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, [(name, "s-1")])
        assert found is not None and found.source == "header", name


def test_headers_are_tried_in_the_configured_order() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    both = [("session-id", "codex"), ("x-session-id", "ours")]
    assert identify(body, both) == identify(body, [("x-session-id", "ours")])


def test_prompt_cache_key_then_fingerprint() -> None:
    short = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "conv-7"}
    found = identify(short)
    assert found is not None and found.source == "prompt_cache_key"
    assert identify({**short, "prompt_cache_key": " "}) is None  # blank, and too short to fingerprint
    long = identify(conversation(LONG, "hi"))
    assert long is not None and long.source == "fingerprint"


def test_short_prompts_get_no_fingerprint() -> None:
    assert identify(conversation("be brief", "hi")) is None


def test_tenants_never_share_a_session() -> None:
    body = conversation(LONG, "hi")
    assert identify(body, [("x-session-id", "s")], scope="k1") != identify(body, [("x-session-id", "s")], scope="k2")
    assert identify(body, scope="k1") != identify(body, scope="k2")


def test_oversized_header_values_are_ignored() -> None:
    assert (
        identify({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, [("x-session-id", "a" * 300)]) is None
    )


def test_later_turns_keep_the_fingerprint() -> None:
    first = identify(conversation(LONG, "question"))
    later = identify(conversation(LONG, "question", "answer", "follow-up", "answer 2", "again"))
    assert first is not None and first == later


def test_responses_and_messages_bodies_have_a_stable_prefix() -> None:
    responses = {"model": "m", "instructions": LONG, "input": [{"role": "user", "content": "q"}]}
    turn_2 = {
        **responses,
        "input": [*responses["input"], {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}],
    }
    assert stable_prefix(responses) == stable_prefix(turn_2)
    messages = {"model": "m", "system": LONG, "messages": [{"role": "user", "content": "q"}]}
    assert stable_prefix(messages) is not None
    assert stable_prefix({"model": "m", "messages": [{"role": "system", "content": "no user yet"}]}) is None


texts = st.text(max_size=40)
tool_lists = st.one_of(st.none(), st.lists(st.fixed_dictionaries({"name": texts}), max_size=2))


@settings(max_examples=300, deadline=None)
@given(
    system_a=texts, first_a=texts, tools_a=tool_lists,
    system_b=texts, first_b=texts, tools_b=tool_lists,
    later=st.lists(texts, max_size=4),
)  # fmt: skip
def test_the_fingerprint_never_merges_two_conversations(
    system_a: str, first_a: str, tools_a: Any, system_b: str, first_b: str, tools_b: Any, later: list[str]
) -> None:
    a = identify(conversation(LONG + system_a, first_a, tools=tools_a))
    b = identify(conversation(LONG + system_b, first_b, *later, tools=tools_b))
    assert a is not None and b is not None
    same_prefix = (system_a, first_a, tools_a) == (system_b, first_b, tools_b)
    assert (a == b) == same_prefix
