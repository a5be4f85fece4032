"""Mid-stream recovery: finishing an answer on another deployment after its stream broke.

Once part of an answer has reached the client, a fallback cannot start over: the client
would read the beginning twice. But a model asked to continue its own partial answer (an
assistant prefill) produces exactly the rest. So when a stream breaks (a cut connection, a
stall past the idle timeout, an error event, an end before the finish) and another deployment
of the plan is marked ``continue_prefill``, the gateway asks it for the rest and streams that
on: the client receives one complete answer, under the headers it already has. Any deployment
that did not fail this request may be asked: one not tried yet, or one the first-token race
(a hedge, an exploring race) stopped because this stream's first token came first.

- Chat: the partial text becomes a last ``{"role": "assistant"}`` message (or extends the
  client's own prefill), marked as the deployment's ``prefill_format`` says. Completions: it
  is appended to the prompt. ``max_tokens`` shrinks by what was already said.
- If nothing of the answer reached the client yet (the break came during reasoning), any
  later deployment may answer anew; its reasoning preamble is dropped like a role chunk.
- Never for ``n`` > 1, ``echo``, tool calls, or an answer the client could not parse.
- Messages API: Anthropic continues an assistant prefill natively, so a text answer is continued
  the same way (the partial text as a last ``assistant`` message; the continuation's
  ``message_start``, ``ping`` and block opening are dropped, its deltas go on in the same block).
  Not with extended ``thinking`` (Anthropic refuses a prefill then) or a tool use.
- Never the Responses API: a stream that breaks after its first byte ends with its error event
  (fallback before the first byte works as for chat). Its events number items and carry the
  response's id, so a second provider's stream cannot be spliced in without rewriting every event,
  and the second response would be a different stored response.
- Bounded by the request's ``AttemptBudget``: attempts count against ``max_attempts``, and none
  starts after the total deadline. A deployment that refuses (an error status, an error event,
  no first token in time) is recorded like any failed attempt, and the next one is asked; when
  none can continue, the client gets the original break's error event, never the refusal. A
  deployment that refuses a continuation with a 4xx is not asked for one again for a while (the
  router's ``may_continue``), and that is logged once, as the configuration problem it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gateway.config import PrefillFormat
from gateway.errors import UpstreamError
from gateway.reading import Reading
from gateway.relay.attempt import Attempt, ClientFault
from gateway.relay.budget import AttemptBudget
from gateway.relay.request import ProxyRequest
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate

_MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True, slots=True)
class Partial:
    """The answer the client has so far: its text, and that text's length in the pinned encoding."""

    text: str
    tokens: int


def can_continue(request: ProxyRequest, reading: Reading) -> bool:
    """Whether the answer broken off in ``reading`` could be continued at all (whatever the deployment)."""
    body = request.body
    if request.endpoint not in ("chat", "completions", "messages") or reading.tool_calls or reading.malformed:
        return False
    if request.endpoint == "messages":
        thinking = body.get("thinking")
        return not (isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"))
    n = body.get("n")
    if n is not None and n != 1:
        return False
    if request.endpoint == "completions":
        prompt = body.get("prompt")
        single = isinstance(prompt, str) or (
            isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str)
        )
        return single and not body.get("echo") and body.get("best_of") in (None, 1)
    return True


def continuation(request: ProxyRequest, partial: Partial, prefill_format: PrefillFormat) -> ProxyRequest | None:
    """The request that asks for the rest of the answer; None when the answer has used its ``max_tokens``."""
    if not partial.text:
        return request
    body = dict(request.body)
    for name in _MAX_TOKEN_FIELDS:
        limit = body.get(name)
        if isinstance(limit, int) and not isinstance(limit, bool):
            if limit - partial.tokens < 1:
                return None
            body[name] = limit - partial.tokens
    if request.endpoint == "completions":
        prompt = body["prompt"]
        body["prompt"] = prompt + partial.text if isinstance(prompt, str) else [prompt[0] + partial.text]
    else:
        messages: list[Any] = list(body["messages"])
        last = messages[-1] if messages else None
        if isinstance(last, dict) and last.get("role") == "assistant" and isinstance(last.get("content"), str):
            # The client sent a prefill of its own: the answer goes on from it.
            prefill = {**last, "content": last["content"] + partial.text}
            messages[-1] = prefill
        else:
            prefill = {"role": "assistant", "content": partial.text}
            messages.append(prefill)
        if request.endpoint == "messages":
            pass  # Anthropic continues a last assistant message as it is
        elif prefill_format == "prefix":
            prefill["prefix"] = True
        elif prefill_format == "vllm":
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body["messages"] = messages
    # A new body: its translations (``ProxyRequest.translations``) are made again, from it.
    return dataclasses.replace(
        request, body=body, prompt_tokens=request.prompt_tokens + partial.tokens, translations={}
    )


async def resume(
    runner: AttemptRunner,
    budget: AttemptBudget,
    request: ProxyRequest,
    spare: list[Candidate],
    partial: Partial,
) -> tuple[Attempt, ProxyRequest] | None:
    """Open a continuation on the next deployment that can give one; None when none can.

    Candidates are taken from ``spare`` (and removed) in plan order. The returned attempt
    has its first output held, ready for the relay; its request is the one to record it with.
    """
    while spare:
        if not budget.allows_another():
            return None
        candidate = spare.pop(0)
        continuing = bool(partial.text)
        if continuing and not (candidate.deployment.continue_prefill and runner.router.may_continue(candidate)):
            continue
        # A deployment reached by translation gets the prefill marked by the translator, in its own API.
        native = request.endpoint in candidate.deployment.apis
        follow_up = continuation(request, partial, candidate.deployment.prefill_format if native else "plain")
        if follow_up is None:
            return None
        attempt = runner.start(follow_up, candidate, budget)
        if attempt is None:
            continue
        try:
            await runner.open(follow_up, attempt, budget)
        except UpstreamError:
            continue  # recorded by open; the original break still stands
        except ClientFault:
            if continuing:
                runner.router.continuation_refused(candidate)  # a 4xx to a prefill: its config is wrong
            continue
        meter = attempt.meter
        if meter is not None and meter.first_error is not None:
            # An error the provider deems the request's fault: a refusal of the prefill, most likely.
            runner.fail(follow_up, attempt, "client_error", None)
            if continuing:
                runner.router.continuation_refused(candidate)
            continue
        return attempt, follow_up
    return None
