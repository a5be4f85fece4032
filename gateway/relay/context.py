"""A request one deployment refuses as its own limit, moved to one that may serve it: a larger window, other inputs.

A ``context_length_exceeded`` 400 is the request's fault on *that* deployment only: the same model
served elsewhere may take 128k tokens where this one takes 8k. So the attempt loop does not relay
it while a later candidate of the plan may have a larger window: it learns the limit the error
states (the router skips the deployment for prompts that large from then on) and tries the next
candidate whose window is larger or not known, never the same one again. Only when none is left
does the client get the provider's 400, unchanged (but on the Messages API, in Anthropic's words:
``as_prompt_too_long``). So is input the deployment does not accept: llama.cpp's server started without a
vision (or audio) projector answers an image with a 500, ``image input is not supported - hint: … mmproj``,
which no retry there cures. It is read as a refusal of the request by that deployment (``refused_input``): not
retried there, not held against its health, the next candidate tried (the model's other deployments may take
images), and, when none is left, a 400 saying the deployment does not accept image input. Other client faults
(a content filter, a bad parameter) are relayed as they are: another deployment would refuse them alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence

from gateway.errors import InvalidRequest, describe_error_body
from gateway.relay.attempt import ClientFault
from gateway.relay.budget import AttemptBudget
from gateway.routing import Candidate, Router
from gateway.types import InputKind

CONTEXT_EXCEEDED = "context_length_exceeded"
CONTEXT_CODES = frozenset({CONTEXT_EXCEEDED, "string_above_max_length"})
# How providers state the limit: OpenAI ("maximum context length is 8192 tokens"), vLLM and others
# ("maximum context length is 8192", "context window of 8192"), Anthropic ("200019 tokens > 200000 maximum"),
# llama.cpp's server ("request (4024 tokens) exceeds the available context size (1024 tokens)"), TGI (a 422:
# "`inputs` tokens + `max_new_tokens` must be <= 4096. Given: ...", "`inputs` must have less than 4096 tokens").
_LIMITS = (
    re.compile(r"maximum context length (?:is|of) (\d+)", re.IGNORECASE),
    re.compile(r"context (?:window|length|size) (?:is |of )?\(?(\d+)", re.IGNORECASE),
    re.compile(r"> ?(\d+) maximum", re.IGNORECASE),
    re.compile(r"`max_new_tokens` must be <= (\d+)"),
    re.compile(r"`inputs` must have less than (\d+) tokens"),
)
_MESSAGES = re.compile(
    r"context.length|context.window|context.size|prompt is too long|too many tokens|"
    r"`inputs` tokens \+ `max_new_tokens` must be|`inputs` must have less than",
    re.IGNORECASE,
)
_UNSUPPORTED_INPUT = re.compile(r"\b(image|audio) input is not supported", re.IGNORECASE)
"""llama.cpp's server, for an image (or audio) part sent to a model loaded without its projector (``--mmproj``)."""


def context_exceeded(fault: ClientFault) -> tuple[bool, int | None]:
    """Whether ``fault`` says the prompt was too long, and the window it states (None: it did not say)."""
    if fault.status not in (400, 422) or len(fault.body) > 16384:
        return False, None
    try:
        body = json.loads(fault.body)
    except ValueError:
        return False, None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        error = {"message": error}  # TGI's: {"error": "Input validation error: ...", "error_type": "validation"}
    if not isinstance(error, dict):
        return False, None
    message = error.get("message")
    message = message if isinstance(message, str) else ""
    if error.get("code") not in CONTEXT_CODES and not _MESSAGES.search(message):
        return False, None
    for pattern in _LIMITS:
        found = pattern.search(message)
        if found:
            return True, int(found.group(1))
    return True, None


_ASKED = re.compile(
    r"(?:(?:resulted in|requested|contains|prompt has|prompt is) |request \()(\d+) (?:input )?tokens", re.IGNORECASE
)


def as_prompt_too_long(message: str, prompt_tokens: int) -> str:
    """A provider's "too long" message as Anthropic words it, for a Messages client: Claude Code knows a prompt too
    long for the window by ``prompt is too long: <n> tokens > <limit> maximum`` (it compacts the conversation, or
    says to), and by nothing else. ``prompt_tokens`` (the gateway's estimate) stands in for a count the provider did
    not give; the provider's own words follow."""
    if "prompt is too long" in message.lower():
        return message
    limit = next((int(m.group(1)) for p in _LIMITS if (m := p.search(message))), None)
    asked = _ASKED.search(message)
    tokens = int(asked.group(1)) if asked else prompt_tokens
    if limit is None:
        return f"prompt is too long ({message})"
    return f"prompt is too long: {max(tokens, limit + 1)} tokens > {limit} maximum ({message})"


def refused_input(deployment: str, status: int, body: bytes) -> ClientFault | None:
    """The refusal of input ``deployment`` does not accept that an error answer states (any status: llama.cpp's is a
    500), as a 400 naming the deployment and the kind of input; None for any other error."""
    if len(body) > 16384:
        return None
    message = describe_error_body(body)[0]
    found = _UNSUPPORTED_INPUT.search(message)
    if found is None:
        return None
    kind: InputKind = "image" if found.group(1).lower() == "image" else "audio"
    words = f"deployment '{deployment}' does not accept {kind} input (upstream returned {status}: {message})"
    error = InvalidRequest(words, code=f"{kind}_input_unsupported")
    return ClientFault(error.status_code, error.to_json(), "application/json", unsupported=kind)


def refused_here(
    router: Router, budget: AttemptBudget, candidate: Candidate, fault: ClientFault
) -> tuple[bool, int | None]:
    """Whether ``fault`` is ``candidate``'s refusal alone (its window too small for the prompt, input it does not
    accept), and the window it states.

    If so, a window or the refused kind of input is learned (once per request and deployment; the router plans
    later requests around it) and ``candidate`` joins the request's ``refused_here``: no later fallback of this
    request asks it again.
    """
    exceeded, limit = (True, None) if fault.unsupported is not None else context_exceeded(fault)
    if exceeded and candidate.name not in budget.refused_here:
        if fault.unsupported is None:
            router.context_exceeded(candidate, limit)
        else:
            router.input_refused(candidate, fault.unsupported, describe_error_body(fault.body)[0])
        budget.refused_here.append(candidate.name)
    return exceeded, limit


def may_serve(
    router: Router,
    failed: Candidate,
    fault: ClientFault,
    limit: int | None,
    candidates: Sequence[Candidate],
    tried: Collection[str],
) -> tuple[Candidate, ...]:
    """The candidates not ``tried`` that may serve what ``failed`` refused (``refused_here``): any other, for input
    it does not accept; those whose window may hold what ``failed``'s (``limit``, or known) could not."""
    if fault.unsupported is not None:
        return tuple(candidate for candidate in candidates if candidate.name not in tried)
    ceiling = limit if limit is not None else router.context_window(failed)
    larger = []
    for candidate in candidates:
        if candidate.name in tried:
            continue
        window = router.context_window(candidate)
        if window is None or ceiling is None or window > ceiling:
            larger.append(candidate)
    return tuple(larger)
