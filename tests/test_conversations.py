"""Stateful Responses kept by the gateway (``gateway.conversations``, ``gateway.conversation_flow``): a follow-up
is expanded to its whole conversation before routing, so any deployment can continue it; ``GET`` answers from
the store; ``store: false`` keeps nothing; memory and Redis behave alike. Driven through the real ``openai`` SDK
against native Responses deployments with ``[responses] state = "gateway"`` (a deployment reached by translation
takes the same path, with no setting)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.conversation_flow import ResponseCapture
from gateway.conversations import InMemoryConversationStore, StoredResponse
from gateway.fakes import FakeBehavior
from gateway.fakes.agent import RESULT_PREFIX
from gateway.fakes.provider import answer_words
from tests.redis_server import RedisServer
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
FIRST = "".join(answer_words(0, 3))
FIRST_OF_AGENT = "".join(answer_words(0, FakeBehavior().output_tokens))


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def kept_config(*fakes: FakeServer, state: str = "gateway", stats: dict[str, Any] | None = None) -> Any:
    extra: dict[str, Any] = {"responses": {"state": state, "ttl_s": 3600}}
    if stats is not None:
        extra["stats"] = stats
    apis = {f.name: {"apis": ["responses"]} for f in fakes}
    return gateway_config(list(fakes), provider_options=apis, extra=extra)


def sent_inputs(fake: FakeServer) -> list[dict[str, Any]]:
    return [r.body for r in fake.app.state.recorded if r.path.endswith("/responses") and r.body is not None]


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_follow_up_carries_the_whole_conversation_and_get_answers_from_the_store(
    fakes: Fakes, start_gateway: StartGateway, backend: str, request: pytest.FixtureRequest
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    stats = None
    if backend == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        stats = {"backend": "redis", "redis_url": redis.url, "key_prefix": "conv"}
    gateway = start_gateway(kept_config(fake, stats=stats))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        first = client.responses.create(model="m", input="hello", instructions="be brief")
        with client.responses.stream(model="m", input="and then?", previous_response_id=first.id) as stream:
            second = stream.get_final_response()
        third = client.responses.create(
            model="m", input=[{"role": "user", "content": "last"}], previous_response_id=second.id
        )
        fetched = client.responses.retrieve(second.id)
        items = client.responses.input_items.list(second.id, order="asc")
    assert first.output_text == FIRST and third.output_text == FIRST
    sent = sent_inputs(fake)
    assert all("previous_response_id" not in body for body in sent)
    texts = [_texts(body["input"]) for body in sent]
    assert texts == [["hello"], ["hello", FIRST, "and then?"], ["hello", FIRST, "and then?", FIRST, "last"]]
    # Answered by the gateway: the fake was never asked for them.
    assert fetched.id == second.id and fetched.output_text == FIRST
    assert [_text(item.model_dump()) for item in items.data] == ["hello", FIRST, "and then?"]
    assert not any("/responses/" in r.path for r in fake.app.state.recorded)
    if backend == "redis":
        # Written to Redis off the request path: the last answer's write may land just after its reply.
        wait_until(lambda: len(redis.client().keys("{conv:conv:*")) == 3, what="three conversations in Redis")
        keys = redis.client().keys("{conv:conv:*")
        assert all(0 < redis.client().pttl(k) <= 3_600_000 for k in keys)


def test_a_follow_up_may_go_to_another_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    a, b = fakes.start("a", FakeBehavior(output_tokens=3)), fakes.start("b", FakeBehavior(output_tokens=3))
    gateway = start_gateway(kept_config(a, b))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        first = client.responses.create(model="m", input="hello")
        httpx.post(a.url + "/_fake/behavior", json={"status": 503})  # the one that answered is down now
        second = client.responses.create(model="m", input="more", previous_response_id=first.id)
    assert second.output_text == FIRST
    assert _texts(sent_inputs(b)[-1]["input"]) == ["hello", FIRST, "more"]


def test_held_by_the_provider_a_follow_up_stays_pinned(fakes: Fakes, start_gateway: StartGateway) -> None:
    a, b = fakes.start("a", FakeBehavior(output_tokens=3)), fakes.start("b", FakeBehavior(output_tokens=3))
    gateway = start_gateway(kept_config(a, b, state="provider"))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        first = client.responses.create(model="m", input="hello")
        second = client.responses.create(model="m", input="more", previous_response_id=first.id)
    assert second.output_text == FIRST
    owner = first.id.split("_")[1]  # the fake names its ids resp_<server>_<n>
    recorded = a if owner == "a" else b
    assert sent_inputs(recorded)[-1]["previous_response_id"] == first.id
    assert gateway.runtime.conversations.lookup(first.id) is None  # type: ignore[attr-defined]


def test_store_false_keeps_nothing(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    gateway = start_gateway(kept_config(fake))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        unstored = client.responses.create(model="m", input="hello", store=False)
        with client.responses.stream(model="m", input="hello", store=False) as stream:
            streamed = stream.get_final_response()
        stored = client.responses.create(model="m", input="hello")
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
    store = gateway.runtime.conversations
    assert isinstance(store, InMemoryConversationStore)
    assert store.lookup(unstored.id) is None and store.lookup(streamed.id) is None
    assert store.lookup(stored.id) is not None


def test_delete_forgets_and_another_key_cannot_read_it(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    gateway = start_gateway(kept_config(fake), environ={"GATEWAY_API_KEYS": "one,two"})
    with openai.OpenAI(base_url=gateway.base_url, api_key="one", max_retries=0) as client:
        first = client.responses.create(model="m", input="hello")
        with openai.OpenAI(base_url=gateway.base_url, api_key="two", max_retries=0) as other:
            with pytest.raises(openai.NotFoundError):
                other.responses.retrieve(first.id)
        assert client.responses.retrieve(first.id).id == first.id
        client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)


def test_the_memory_store_is_bounded_by_bytes_and_expires() -> None:
    now = [0.0]
    store = InMemoryConversationStore(max_bytes=600, clock=lambda: now[0])
    stored = StoredResponse("m", "k", [{"role": "user", "content": "x" * 100}], [], {"id": "r"})
    size = len(stored.encode())
    for i in range(5):
        store.put(f"r{i}", stored, ttl_s=10)
    assert store.size <= 600 and store.size == size * (600 // size)
    assert store.lookup("r0") is None and store.lookup("r4") is not None  # least recently used out first
    now[0] = 11.0
    assert store.lookup("r4") is None


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def _texts(items: str | list[dict[str, Any]]) -> list[str]:
    return [items] if isinstance(items, str) else [_text(item) for item in items]


def test_only_an_answer_that_ended_is_captured() -> None:
    def captured(status: int, chunks: list[bytes]) -> dict[str, Any] | None:
        capture = ResponseCapture(_discard)

        async def play() -> None:
            await capture.send({"type": "http.response.start", "status": status, "headers": []})
            for chunk in chunks:
                await capture.send({"type": "http.response.body", "body": chunk, "more_body": True})

        asyncio.run(play())
        return capture.response(streamed=True)

    created = b'event: response.created\ndata: {"type":"response.created","response":{"id":"r1"}}\n\n'
    done = b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r1","output":[]}}\n\n'
    assert captured(200, [created, done[:30], done[30:]]) == {"id": "r1", "output": []}  # split anywhere
    assert captured(200, [created]) is None  # broke before its end: nothing to keep
    cut = done.replace(b"response.completed", b"response.incomplete")
    assert captured(200, [created, cut]) == {"id": "r1", "output": []}  # cut by its limit: kept, as OpenAI does
    assert captured(400, [done]) is None


async def _discard(message: Any) -> None:
    pass


EXEC_COMMAND: Any = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    "strict": False,
}


def test_a_conversation_on_a_chat_only_deployment_is_kept_by_the_gateway(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Translation and the store together, with no setting: responses created through a chat deployment (``store``
    defaults to true) are kept; a follow-up's ``previous_response_id`` is expanded into the whole conversation, tool
    call and result included, before it is translated; ``GET`` answers from the store."""
    fake = fakes.start("a", FakeBehavior(agent=True, agent_command="echo kept"))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        first = client.responses.create(model="m", input="run it", instructions="be brief", tools=[EXEC_COMMAND])
        call = first.output[0]
        assert call.type == "function_call" and json.loads(call.arguments) == {"cmd": "echo kept"}
        output: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "kept"}
        with client.responses.stream(
            model="m", input=[output], previous_response_id=first.id, tools=[EXEC_COMMAND]
        ) as stream:
            second = stream.get_final_response()
        third = client.responses.create(model="m", input="thanks", previous_response_id=second.id)
        fetched = client.responses.retrieve(second.id)
    assert second.output_text == f"{RESULT_PREFIX} kept" and third.output_text == FIRST_OF_AGENT
    sent = [r.body for r in fake.app.state.recorded if r.path.endswith("/chat/completions") and r.body]
    assert all("previous_response_id" not in body and "store" not in body for body in sent)
    # A follow-up's instructions are its own (OpenAI does not carry them over): the first turn's stay with it.
    assert sent[0]["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "run it"}]
    roles = [m["role"] for m in sent[2]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[2]["messages"][1]["tool_calls"][0]["id"] == call.call_id == sent[2]["messages"][2]["tool_call_id"]
    assert sent[2]["messages"][3]["content"] == f"{RESULT_PREFIX} kept"
    assert fetched.id == second.id and fetched.output_text == f"{RESULT_PREFIX} kept"
    assert not any("/responses" in r.path for r in fake.app.state.recorded)
    assert [(s.deployment, s.outcome) for s in gateway.samples.samples] == [("a", "ok")] * 3


def test_an_incomplete_answer_is_kept_and_can_be_continued(fakes: Fakes, start_gateway: StartGateway) -> None:
    """OpenAI stores a response cut by ``max_output_tokens`` (``status: "incomplete"``): it can be retrieved and
    continued. So does the gateway, streamed or not; before, only a completed one was kept and the follow-up got
    ``previous_response_not_found``."""
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        whole = client.responses.create(model="m", input="hello", max_output_tokens=2)
        # The SDK's ``responses.stream`` helper wants ``response.completed``: read the events themselves.
        events = list(client.responses.create(model="m", input="again", max_output_tokens=2, stream=True))
        assert events[-1].type == "response.incomplete"
        streamed = events[-1].response
        for cut, said in ((whole, "hello"), (streamed, "again")):
            assert cut.status == "incomplete"
            fetched = client.responses.retrieve(cut.id)
            assert fetched.status == "incomplete" and fetched.output_text == cut.output_text
            client.responses.create(model="m", input="go on", previous_response_id=cut.id)
            sent = [r.body for r in fake.app.state.recorded if r.body is not None][-1]
            assert [_text(m) for m in sent["messages"]] == [said, cut.output_text, "go on"]


def test_input_items_come_in_openais_item_shape_and_page_as_the_sdk_asks(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Short-form input (a message without ``type``, string ``content``) is listed as OpenAI lists it, so that the
    SDK parses each item as a message with content parts; the SDK's auto-pagination walks every page in either
    order; a parameter out of OpenAI's range is a 400 naming it; ``retrieve(stream=True)`` of a response that was
    not a background one is a 400, not a JSON body the SDK reads as a stream of no events."""
    fake = fakes.start("a", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        first = client.responses.create(model="m", input=[{"role": "user", "content": "one"}])
        said: Any = [{"type": "message", "role": "user", "content": "two"}]
        second = client.responses.create(model="m", input=said, previous_response_id=first.id)
        listed = {
            order: list(client.responses.input_items.list(second.id, limit=1, order=order)) for order in ("asc", "desc")
        }
        for query in ({"order": "sideways"}, {"limit": 0}, {"limit": 101}):
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.input_items.list(second.id, **query)
            assert refused.value.param == next(iter(query))
        with pytest.raises(openai.BadRequestError) as not_streamed:
            client.responses.retrieve(second.id, stream=True)
        assert not_streamed.value.param == "stream"
    assert listed["desc"] == listed["asc"][::-1]
    texts = []
    for item in listed["asc"]:
        assert item.type == "message" and item.status == "completed"
        texts.append(item.content[0].text)  # type: ignore[union-attr]
    assert texts == ["one", FIRST, "two"]
    assert [item.role for item in listed["asc"]] == ["user", "assistant", "user"]  # type: ignore[union-attr]


def test_a_stream_the_client_cut_is_not_kept_and_says_so(fakes: Fakes, start_gateway: StartGateway) -> None:
    """A streamed response the client hung up on never ended: nothing is kept, the upstream is cancelled, and
    retrieving or continuing its id says why it is unknown, on a model whose deployments are all reached by
    translation too."""
    fake = fakes.start("a", FakeBehavior(output_tokens=500, tokens_per_s=20))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}))
    body = {"model": "m", "input": "hello", "stream": True}
    with httpx.stream("POST", gateway.base_url + "/responses", json=body, timeout=10) as response:
        seen = b""
        for piece in response.iter_raw():
            seen += piece
            if b"response.output_text.delta" in seen:
                break
    created = json.loads(seen.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    cut = created["response"]["id"]
    wait_until(lambda: fake.app.state.open_streams == 0, timeout=3.0, what="upstream stream cancelled")
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as unknown:
            client.responses.retrieve(cut)
        # As docs/apis.md says for an id the gateway never bound (before, every deployment of this chat-only model
        # refused ``previous_response_id`` as a field the Chat Completions API cannot carry: a 400 about translation).
        with pytest.raises(openai.NotFoundError) as refused:
            client.responses.create(model="m", input="go on", previous_response_id=cut)
    assert "cut before its end" in unknown.value.message and "cut before its end" in refused.value.message
    assert refused.value.code == "previous_response_not_found" and refused.value.param == "previous_response_id"
    assert gateway.runtime.conversations.lookup(cut) is None  # type: ignore[attr-defined]


def test_a_kept_conversation_reaches_a_native_responses_deployment_without_ids_it_never_made(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """A turn answered by a chat deployment (kept by the gateway, its items named ``msg_<gateway id>_0``), continued
    on a deployment that speaks the Responses API natively: the earlier items go without ids, which OpenAI would
    look up and refuse ("Item with id '…' not found"); the turn's instructions stay its own."""
    chat, native = fakes.start("a", FakeBehavior(output_tokens=3)), fakes.start("b", FakeBehavior(output_tokens=3))
    apis = {"a": {"apis": ["chat"]}, "b": {"apis": ["responses"]}}
    gateway = start_gateway(gateway_config([chat, native], provider_options=apis))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        only: Any = {"provider": {"only": ["a"]}}
        first = client.responses.create(model="m", input="hello", instructions="be brief", extra_body=only)
        only = {"provider": {"only": ["b"]}}
        second = client.responses.create(model="m", input="more", previous_response_id=first.id, extra_body=only)
    assert second.id in native.app.state.responses
    (sent,) = sent_inputs(native)
    assert _texts(sent["input"]) == ["hello", FIRST, "more"] and "instructions" not in sent
    assert [item.get("id") for item in sent["input"]] == [None, None, None]
