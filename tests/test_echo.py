"""``echo: true`` on ``/v1/completions``: the client gets its prompt back before the answer, and every number
the gateway keeps (stats, metrics, spend, the access log's) counts only the answer, streamed or not, with the
provider's usage or without it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.fakes.chat import decoded
from gateway.relay.echo import EchoedPrompt
from gateway.samples import Sample
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream
from tests.support.servers import ServerThread
from tests.support.wait import wait_until

PROMPT = "Write about the sea. " * 60
"""A prompt far longer than the answer (32 tokens): counted as output, it would swamp it."""


def _gateway(fakes: Fakes, start_gateway: Callable[..., Gateway], *, usage: bool) -> Gateway:
    fake = fakes.start("a")
    config = gateway_config(
        [fake],
        deployments={"a": {"price_in": 1.0, "price_out": 1000.0}},
        # Without usage in streams the spend is the gateway's own count: the case where the echo was billed.
        provider_options={"a": {"stream_usage": usage}},
    )
    return start_gateway(config)


def _complete(gateway: Gateway, *, echo: bool, stream: bool) -> tuple[str, Sample]:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    before = len(gateway.samples.samples)
    if stream:
        chunks = client.completions.create(model="m", prompt=PROMPT, echo=echo, stream=True, max_tokens=64)
        text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    else:
        text = client.completions.create(model="m", prompt=PROMPT, echo=echo, max_tokens=64).choices[0].text
    wait_until(lambda: len(gateway.samples.samples) > before)  # recorded once the last byte went out
    samples = gateway.samples.samples[before:]
    assert len(samples) == 1 and samples[0].outcome == "ok"
    return text, samples[0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])
def test_an_echoed_prompt_is_not_counted_as_output(
    fakes: Fakes, start_gateway: Callable[..., Gateway], caplog: pytest.LogCaptureFixture, stream: bool, usage: bool
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    gateway = _gateway(fakes, start_gateway, usage=usage)
    plain_text, plain = _complete(gateway, echo=False, stream=stream)
    echoed_text, echoed = _complete(gateway, echo=True, stream=stream)
    assert echoed_text == PROMPT + plain_text  # the client got its echo
    assert plain.output_tokens is not None and plain.output_tokens <= 32
    assert echoed.output_tokens == plain.output_tokens
    assert echoed.cost_usd == pytest.approx(plain.cost_usd)
    assert echoed.validity == plain.validity == "valid"  # the prompt, repeated, is not a degenerate answer
    output = gateway.metrics.registry.get_sample_value(
        "gateway_tokens_total", {"model": "m", "provider": "a", "type": "output"}
    )
    assert output == 2 * plain.output_tokens
    wait_until(lambda: len(access_lines(caplog)) == 2)
    assert [line["output_tokens"] for line in access_lines(caplog)] == [plain.output_tokens] * 2


def test_each_choice_s_echo_is_taken_out(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    # n = 2: the whole body's two texts, each the prompt and its answer, are read as one.
    gateway = _gateway(fakes, start_gateway, usage=True)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    found: list[Sample] = []
    for echo in (False, True):
        answer = client.completions.create(model="m", prompt=PROMPT, echo=echo, n=2, max_tokens=64)
        assert [choice.text.startswith(PROMPT) for choice in answer.choices] == [echo, echo]
        wait_until(lambda: len(gateway.samples.samples) == len(found) + 1)
        found.append(gateway.samples.samples[-1])
    plain, echoed = found
    assert plain.output_tokens is not None and plain.output_tokens <= 64
    assert echoed.output_tokens == plain.output_tokens and echoed.validity == plain.validity == "valid"


@pytest.mark.parametrize("prompt", [PROMPT, [PROMPT]], ids=["text", "list"])
def test_a_streamed_echo_is_not_the_first_token(
    fakes: Fakes, start_gateway: Callable[..., Gateway], prompt: str | list[str]
) -> None:
    """The fake sends the echoed prompt with its headers and its first generated word ``ttft_s`` later: the first
    token, and the answer's first token and speed, are the generated text's, not the echo's."""
    gateway = _gateway(fakes, start_gateway, usage=True)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    wait = {"fake": {"ttft_s": 0.4, "tokens_per_s": 100}}
    chunks = client.completions.create(model="m", prompt=prompt, echo=True, stream=True, max_tokens=16, extra_body=wait)
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text.startswith(PROMPT) and len(text) > len(PROMPT)
    wait_until(lambda: len(gateway.samples.samples) == 1)
    sample = gateway.samples.samples[0]
    assert sample.outcome == "ok" and sample.output_tokens == 16
    assert sample.ttft_s is not None and sample.ttft_s >= 0.4
    assert sample.first_answer_s is not None and sample.first_answer_s >= 0.4
    # 16 tokens at 100/s: the window is the answer's (150 ms), not the 400 ms wait after the echo as well (under 30/s).
    assert sample.tokens_per_s is not None and sample.tokens_per_s > 50


def test_an_echo_joined_to_the_first_token_is_that_token(
    test_servers: list[ServerThread], start_gateway: Callable[..., Gateway]
) -> None:
    """vLLM sends each choice's echo with its first generated text in one chunk: that chunk is the first token, and
    only the prompt is taken out of the count."""
    upstream = ScriptedUpstream("v")
    test_servers.append(upstream.server.start())
    head = {"id": "c", "object": "text_completion", "created": 1, "model": "m"}
    pieces = [(PROMPT + " hello", None), (" world", None), ("", "stop")]
    events = [{**head, "choices": [{"index": 0, "text": t, "finish_reason": f}]} for t, f in pieces]
    upstream.answer_sse([*[(None, event) for event in events], (None, "[DONE]")])
    gateway = start_gateway(gateway_config([upstream], provider_options={"v": {"stream_usage": False}}))
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    chunks = client.completions.create(model="m", prompt=PROMPT, echo=True, stream=True, max_tokens=16)
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == PROMPT + " hello world"
    wait_until(lambda: len(gateway.samples.samples) == 1)
    sample = gateway.samples.samples[0]
    assert (sample.outcome, sample.output_tokens) == ("ok", 2) and sample.ttft_s is not None


IDS = list(range(1000, 1120))
"""A prompt of 120 token ids; the fake's tokenizer decodes id ``n`` as `` t<n>`` (``gateway.fakes.chat.decoded``)."""
DECODED = "".join(decoded(IDS))


@pytest.mark.parametrize("logprobs", [None, 1], ids=["plain", "logprobs"])
@pytest.mark.parametrize("prompt", [IDS, [IDS]], ids=["ids", "list-of-ids"])
def test_a_streamed_echo_of_token_ids_is_not_the_first_token(
    fakes: Fakes, start_gateway: Callable[..., Gateway], prompt: list[int] | list[list[int]], logprobs: int | None
) -> None:
    """The gateway cannot decode token ids (the model's tokenizer is not its own), yet the echo is known: by the
    count of tokens the events' ``logprobs`` list, or, without them, as the choice's first text. The first token and
    the answer's speed are the generated text's, and only the generated text is counted."""
    gateway = _gateway(fakes, start_gateway, usage=True)
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    wait = {"fake": {"ttft_s": 0.4, "tokens_per_s": 100}}
    chunks = client.completions.create(
        model="m", prompt=prompt, echo=True, stream=True, max_tokens=16, logprobs=logprobs, extra_body=wait
    )
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text.startswith(DECODED) and len(text) > len(DECODED)
    wait_until(lambda: len(gateway.samples.samples) == 1)
    sample = gateway.samples.samples[0]
    assert sample.outcome == "ok" and sample.output_tokens == 16
    assert sample.ttft_s is not None and sample.ttft_s >= 0.4
    assert sample.first_answer_s is not None and sample.first_answer_s >= 0.4
    assert sample.tokens_per_s is not None and sample.tokens_per_s > 50


def test_an_echo_of_token_ids_joined_to_the_first_token_is_that_token_by_its_logprobs(
    test_servers: list[ServerThread], start_gateway: Callable[..., Gateway]
) -> None:
    """vLLM's first event holds the echo and the first generated text, and its ``logprobs`` list the tokens of
    both: more than the prompt's ids, so that event is the first token; the count takes the ids off."""
    upstream = ScriptedUpstream("v")
    test_servers.append(upstream.server.start())
    head = {"id": "c", "object": "text_completion", "created": 1, "model": "m"}
    echo = [" hello"] * len(IDS)  # one token each in the pinned encoding as well
    pieces = [([*echo, " world"], None), ([" again"], None), ([], "stop")]
    events = [
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "text": "".join(tokens),
                    "logprobs": {"tokens": tokens} if tokens else None,
                    "finish_reason": f,
                }
            ],
        }
        for tokens, f in pieces
    ]
    upstream.answer_sse([*[(None, event) for event in events], (None, "[DONE]")])
    gateway = start_gateway(gateway_config([upstream], provider_options={"v": {"stream_usage": False}}))
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    chunks = client.completions.create(model="m", prompt=IDS, echo=True, stream=True, max_tokens=16, logprobs=0)
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == "".join(echo) + " world again"
    wait_until(lambda: len(gateway.samples.samples) == 1)
    sample = gateway.samples.samples[0]
    assert (sample.outcome, sample.output_tokens) == ("ok", 2) and sample.ttft_s is not None


def test_which_events_echo_a_prompt_of_token_ids() -> None:
    """``EchoedPrompt`` alone, per choice: logprobs counted off each prompt's ids (``n`` choices per prompt), the
    first text taken as the echo where no logprobs tell, an answer's end never held back."""

    def event(index: int, text: str, tokens: int | None = None, finish: str | None = None) -> dict[str, Any]:
        logprobs = {"tokens": ["x"] * tokens} if tokens is not None else None
        return {"choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]}

    echo = EchoedPrompt({"prompt": [[1, 2, 3], [4, 5]], "n": 2})
    assert echo.repeats(event(0, "a b", 2)) and echo.repeats(event(0, " c", 1))  # the echo, in two events
    assert not echo.repeats(event(0, " d", 1))  # the first generated token
    assert not echo.repeats(event(1, "a b c d", 4))  # the echo and a generated token in one event
    assert echo.repeats(event(2, "e f"))  # prompt 2's first choice: no logprobs, the first text is the echo
    assert not echo.repeats(event(2, " g"))
    assert not echo.repeats(event(3, "e f", finish="length"))  # an answer of just its echo ends there
    assert not echo.repeats(event(5, "h"))  # a choice of no prompt
    assert echo.echoed == {0: "a b c", 2: "e f"}
    assert echo.joined == {0: 0, 1: 3, 2: 0}  # choice 1's first event held its whole echo: counted off by its ids
    ignored = EchoedPrompt({"prompt": list(range(40))})  # a provider that does not echo: one generated token
    assert not ignored.repeats(event(0, " The")) and ignored.joined == {0: 0}


def test_llama_cpp_s_logprobs_tell_by_their_ids() -> None:
    """llama.cpp's completions ``logprobs`` list each token's id (``content``): an echo's are the prompt's."""

    def event(ids: list[int]) -> dict[str, Any]:
        content = [{"id": n, "token": f" t{n}", "logprob": -0.5} for n in ids]
        text = "".join(f" t{n}" for n in ids)
        return {"choices": [{"index": 0, "text": text, "logprobs": {"content": content}, "finish_reason": None}]}

    echo = EchoedPrompt({"prompt": [2, 651, 6588]})
    assert echo.repeats(event([2, 651])) and echo.repeats(event([6588])) and not echo.repeats(event([603]))
    ignored = EchoedPrompt({"prompt": [2, 651, 6588]})  # llama.cpp's server ignores ``echo``
    assert not ignored.repeats(event([603])) and ignored.joined == {0: 0} and not ignored.echoed


WORDS = [" hello"] * len(IDS)
"""An echo of ``IDS`` as a provider's tokenizer might decode it: one token each in the pinned encoding as well."""


@pytest.mark.parametrize(
    ("echoed", "logprobs", "usage", "expected"),
    [
        # Echo ignored (llama.cpp): the answer is its generated text only, whatever else it says.
        (False, None, 3, 3),
        (False, None, None, 3),
        (False, "ids", None, 3),
        (False, "tokens", 3, 3),
        # Echoed: its logprobs list the echo's tokens (and ids); else the usage shows the text holds more.
        (True, "ids", None, 3),
        (True, "tokens", 3, 3),
        (True, None, 3, 3),
    ],
    ids=[
        "ignored-usage",
        "ignored-nothing-told",
        "ignored-llama-logprobs",
        "ignored-openai-logprobs",
        "echoed-llama-logprobs",
        "echoed-openai-logprobs",
        "echoed-usage",
    ],
)
def test_a_whole_answers_echo_of_token_ids_is_taken_out_only_where_it_says_so(
    test_servers: list[ServerThread],
    start_gateway: Callable[..., Gateway],
    echoed: bool,
    logprobs: str | None,
    usage: int | None,
    expected: int,
) -> None:
    """A whole answer to a prompt of token ids with ``echo``: the gateway cannot decode the ids, so what the answer
    says decides whether its text begins with their echo: its ``logprobs`` (their ids, llama.cpp's; their tokens,
    OpenAI's and vLLM's, counted against ``usage``), else the provider's ``usage.completion_tokens`` against the
    text's own count; with neither, nothing is taken off (a provider that ignored ``echo`` lost none of its count)."""
    upstream = ScriptedUpstream("v")
    test_servers.append(upstream.server.start())
    generated = [" world", " again", " now"]
    tokens = [*WORDS, *generated] if echoed else generated
    ids = [*IDS, 7, 8, 9] if echoed else [7, 8, 9]
    listed: Any = None
    if logprobs == "ids":
        listed = {"content": [{"id": n, "token": t, "logprob": -0.5} for n, t in zip(ids, tokens, strict=True)]}
    elif logprobs == "tokens":
        listed = {"tokens": tokens, "token_logprobs": [None if echoed else -0.5] + [-0.5] * (len(tokens) - 1)}
    choice = {"index": 0, "text": "".join(tokens), "logprobs": listed, "finish_reason": "length"}
    answer: dict[str, Any] = {"id": "c", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
    if usage is not None:
        answer["usage"] = {"prompt_tokens": len(IDS), "completion_tokens": usage, "total_tokens": len(IDS) + usage}
    upstream.answer_json(answer)
    gateway = start_gateway(gateway_config([upstream]))
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    extra: dict[str, Any] = {"logprobs": 1} if logprobs else {}
    got = client.completions.create(model="m", prompt=IDS, echo=True, max_tokens=3, **extra)
    assert got.choices[0].text == "".join(tokens)  # the client has the answer as it came
    wait_until(lambda: len(gateway.samples.samples) == 1)
    sample = gateway.samples.samples[0]
    assert (sample.outcome, sample.output_tokens) == ("ok", expected)
