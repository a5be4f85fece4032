"""The neutral shape every API is read into and written from: a conversation, a reply, a stream's events.

Translating between three APIs pair by pair would take six translators per direction of travel;
through one neutral shape it takes a reader and a writer per API (``chat``, ``messages``,
``responses``). The shape holds exactly what the three have in common, and a little more where one
API's field can ride along to another that has it (``cache_control``, ``top_k``). Opaque reasoning (a signature,
encrypted reasoning) is marked with the API whose provider made it (``Reasoning.maker``): it goes back only there.
Whatever an API says that this shape cannot hold is refused by that API's reader, naming the field
(``Untranslatable``), never dropped.

Everything here is plain data, built fresh per request: readers and writers are pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.errors import InvalidRequest

Api = Literal["chat", "messages", "responses"]
TRANSLATABLE: tuple[Api, ...] = ("chat", "messages", "responses")
"""The APIs translated between, in the order a translated request prefers them upstream: chat's mapping is
the most complete, and the Messages API's next."""


def as_api(name: str) -> Api:
    """``name`` as one of the translated APIs (the caller knows it is one: a deployment reached by translation)."""
    if name not in TRANSLATABLE:
        raise ValueError(f"not a translated API: {name!r}")
    return name


StopReason = Literal["end", "length", "tool", "stop_sequence", "filter"]
ToolMode = Literal["auto", "none", "required", "tool"]
BuiltinTools = Literal["refuse", "omit"]
BUILTIN_TOOLS: tuple[BuiltinTools, ...] = ("refuse", "omit")
"""What a translation does with a built-in tool the target cannot run (web search, code interpreter, ...):
refuse the request naming it (the default), or omit the tool and say so (``omitted_tools``)."""


class Untranslatable(InvalidRequest):
    """A request field the target API cannot carry: a 400 naming the field (``param``), never a silent drop."""

    def __init__(self, field_path: str, target: str, why: str = "") -> None:
        reason = f": {why}" if why else ""
        super().__init__(
            f"'{field_path}' cannot be translated to the {target} API{reason}; send it to a deployment "
            f"that speaks this API natively",
            param=field_path,
            code="untranslatable_field",
        )
        self.field_path = field_path
        self.why = why


@dataclass(slots=True)
class Text:
    text: str
    cache: dict[str, Any] | None = None
    """Anthropic's ``cache_control`` on this block (None: none)."""


@dataclass(slots=True)
class Image:
    url: str | None = None
    """An http(s) URL (None for inline data)."""
    data: str | None = None
    """Base64 bytes, with ``media_type``."""
    media_type: str | None = None
    detail: str | None = None
    cache: dict[str, Any] | None = None


@dataclass(slots=True)
class Document:
    """A file (a PDF) in a user turn or a tool's result: each API takes one inline (base64 bytes) and the Messages and
    Responses APIs by URL too (chat's ``file``, Messages' ``document``, Responses' ``input_file``)."""

    data: str | None = None
    """Base64 bytes, with ``media_type`` (None for a URL)."""
    media_type: str | None = None
    url: str | None = None
    filename: str | None = None
    """Its name (Messages: ``title``)."""
    cache: dict[str, Any] | None = None


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as JSON text, exactly as the model wrote them."""
    cache: dict[str, Any] | None = None


@dataclass(slots=True)
class ToolResult:
    call_id: str
    content: list[Text | Image | Document]
    is_error: bool = False
    plain: bool = True
    """The result was given as one string (not a list of blocks)."""
    cache: dict[str, Any] | None = None


@dataclass(slots=True)
class Reasoning:
    """A model's reasoning: readable text (any API may be shown it), and what only its maker can read.

    Each vendor refuses opaque reasoning it did not make (a 400), so ``signature`` and ``encrypted`` go back only to
    a provider of ``maker``'s API; elsewhere they are left out and only the text travels, where the target carries
    reasoning text. A client of another API holds them sealed (``gateway.translate.sealed``)."""

    text: str
    signature: str | None = None
    """Anthropic's signature of a thinking block (only another Messages call can check it)."""
    encrypted: str | None = None
    """Opaque reasoning: a ``redacted_thinking`` block's data, a Responses item's ``encrypted_content``, or Gemini's
    ``thought_signature`` on the chat tool call that follows this part."""
    summary: bool = False
    """The text is a summary of the reasoning (Responses' ``summary_text``), not the reasoning itself."""
    maker: Api | None = None
    """The API whose provider made ``signature`` or ``encrypted`` (None: there is neither)."""

    def opaque_for(self, api: Api) -> bool:
        """Whether this part holds opaque reasoning that a provider of ``api`` made (and so may be sent back)."""
        return self.maker == api and (self.signature is not None or self.encrypted is not None)


Part = Text | Image | Document | ToolCall | ToolResult | Reasoning


@dataclass(slots=True)
class Turn:
    role: Literal["user", "assistant"]
    parts: list[Part]
    plain: bool = False
    """The content was given as one string."""
    name: str | None = None
    """Chat's ``name`` of a participant."""
    instruction: Literal["system", "developer"] | None = None
    """A system or developer message after the conversation began (Codex adds them between turns): carried as
    such where the target takes one anywhere (Responses), as a user turn elsewhere."""


@dataclass(slots=True)
class Instruction:
    text: str
    role: Literal["system", "developer"] = "system"
    cache: dict[str, Any] | None = None
    glued: bool = False
    """The rest of the previous instruction's message, cut from it where a part ends with a cache mark (chat parts
    with ``cache_control``, for an Anthropic provider): written back into one text, it joins without a separator."""


def system_text(instructions: list[Instruction]) -> str:
    """The instructions as one text (chat's leading system message, Responses' ``instructions``): each message's own
    text, the messages apart by a blank line."""
    return "".join(("" if i.glued or n == 0 else "\n\n") + i.text for n, i in enumerate(instructions))


@dataclass(slots=True)
class Tool:
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    cache: dict[str, Any] | None = None


@dataclass(slots=True)
class ToolChoice:
    mode: ToolMode
    name: str | None = None
    allowed: list[str] | None = None
    """OpenAI's ``allowed_tools``: the only functions the model may call (``mode`` auto or required), the tool list
    kept whole for the prompt cache. The Messages API has no such choice: it is offered only those tools."""


@dataclass(slots=True)
class OutputFormat:
    kind: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


@dataclass(slots=True)
class ReasoningAsk:
    """What the client asked of the model's reasoning: an effort (OpenAI) or a token budget (Anthropic)."""

    effort: str | None = None
    budget_tokens: int | None = None
    enabled: bool = True
    summary: str | None = None
    adaptive: bool = False
    """Anthropic's ``thinking: {type: adaptive}``: the model decides how much to think, at the asked effort."""

    def openai_effort(self, off: str) -> str:
        """The effort an OpenAI API is asked: the client's own, else one from a thinking budget (an approximation:
        the scales differ), ``high`` for adaptive thinking without one (Anthropic's default effort), and ``off``
        (the target's lowest) when thinking is disabled."""
        if self.effort is not None:
            return self.effort
        if not self.enabled:
            return off
        if self.adaptive and self.budget_tokens is None:
            return "high"
        budget = self.budget_tokens or 0
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


@dataclass(slots=True)
class Conversation:
    """A request, whatever API it came in: instructions, turns, tools and the sampling options."""

    turns: list[Turn]
    system: list[Instruction] = field(default_factory=list)
    system_plain: bool = True
    """The Messages API's ``system`` was one string (not a list of blocks)."""
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] | None = None
    stop_plain: bool = False
    """Chat's ``stop`` was one string."""
    output: OutputFormat | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    reasoning: ReasoningAsk | None = None
    stream: bool = False
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    """The processing tier asked for, by OpenAI's name of it (``gateway.translate.tiers``)."""
    verbosity: str | None = None
    prompt_cache_retention: str | None = None
    """Chat's and Responses' own asks, carried between them (``gateway.translate.openai_shared``)."""
    omitted_tools: list[str] = field(default_factory=list)
    """Built-in tools the client offered that were left out (``builtin_tools = "omit"``), by name: the target
    cannot run them, and the operator chose to serve the request without them rather than refuse it."""


@dataclass(slots=True)
class Usage:
    """Token counts as the provider reported them. ``input_tokens`` is the whole prompt, cached part included."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int | None = None


@dataclass(slots=True)
class Reply:
    """A whole (non-streamed) answer: its parts in order, why it stopped, and its usage."""

    id: str
    model: str
    parts: list[Part]
    stop: StopReason = "end"
    stop_sequence: str | None = None
    usage: Usage | None = None
    created: int = 0


# -- a stream's events, in the neutral shape -------------------------------------------------


@dataclass(slots=True)
class Started:
    id: str
    model: str
    usage: Usage | None = None


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    text: str
    signature: str | None = None
    encrypted: str | None = None
    maker: Api | None = None
    """As ``Reasoning.maker``: the API whose provider made ``signature`` or ``encrypted``."""


@dataclass(slots=True)
class ToolCallStart:
    key: int
    """The upstream's own index of this call (tool-argument deltas name it)."""
    id: str
    name: str


@dataclass(slots=True)
class ToolArgsDelta:
    key: int
    text: str


@dataclass(slots=True)
class Finished:
    stop: StopReason
    stop_sequence: str | None = None


@dataclass(slots=True)
class UsageSeen:
    usage: Usage


@dataclass(slots=True)
class TierSeen:
    """The upstream says the processing tier it serves the answer at (by OpenAI's name: ``gateway.translate.tiers``)."""

    tier: str


@dataclass(slots=True)
class Ended:
    """The upstream's stream is over (``[DONE]``, ``message_stop``, ``response.completed``)."""


@dataclass(slots=True)
class Failed:
    message: str
    status: int = 500
    code: str | None = None


Event = (
    Started
    | TextDelta
    | ReasoningDelta
    | ToolCallStart
    | ToolArgsDelta
    | Finished
    | UsageSeen
    | TierSeen
    | Ended
    | Failed
)
