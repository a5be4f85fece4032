"""Small readers every API's translator shares: typed field access that refuses what it cannot read."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.errors import InvalidRequest
from gateway.translate.ir import (
    Conversation,
    Document,
    Image,
    OutputFormat,
    Tool,
    ToolChoice,
    ToolResult,
    Turn,
    Untranslatable,
)


def bad(path: str, expected: str) -> InvalidRequest:
    return InvalidRequest(f"'{path}' must be {expected}", param=path)


def as_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad(path, "an array")
    return value


def as_dict(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(path, "an object")
    return value


def as_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise bad(path, "a string")
    return value


def opt_str(value: Any, path: str) -> str | None:
    return None if value is None else as_str(value, path)


def opt_int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad(path, "an integer")
    return value


def opt_number(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise bad(path, "a number")
    return value


def opt_bool(value: Any, path: str) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise bad(path, "a boolean")
    return value


def refuse_unknown(body: dict[str, Any], known: frozenset[str], target: str, prefix: str = "") -> None:
    """Refuse, naming it, the first field no mapping knows: a field the target never hears of is a silent drop."""
    for name in body:
        if name not in known:
            raise Untranslatable(prefix + name, target)


def part_texts(content: Any, path: str, kinds: tuple[str, ...]) -> list[str]:
    """The ``text`` of each part of the list of content parts at ``path``, all of a type among ``kinds`` (where only
    text can go: a system message, a reasoning summary); a part of another type is refused, naming it."""
    texts = []
    for index, raw in enumerate(as_list(content, path)):
        part = as_dict(raw, f"{path}[{index}]")
        if part.get("type") not in kinds:
            raise Untranslatable(f"{path}[{index}].type", "other", f"a {part.get('type')!r} part here")
        texts.append(as_str(part.get("text"), f"{path}[{index}].text"))
    return texts


def add_result(conversation: Conversation, result: ToolResult) -> None:
    """A tool's result as the neutral shape holds it: in the user turn of results just before it, else in a new one
    (the OpenAI APIs give each result apart, chat a ``tool`` message and Responses an output item, where the Messages
    API gives one user turn of them)."""
    last = conversation.turns[-1] if conversation.turns else None
    if last is not None and last.role == "user" and all(isinstance(p, ToolResult) for p in last.parts):
        last.parts.append(result)
    else:
        conversation.turns.append(Turn("user", [result]))


def data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64 data)`` of a ``data:<type>;base64,<data>`` URL; None for any other URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url.partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[5 : -len(";base64")], data


def image_url(image: Image) -> str:
    """An image as one URL: its own, or its bytes as a data URL (what OpenAI's APIs take)."""
    if image.url is not None:
        return image.url
    return f"data:{image.media_type or 'image/png'};base64,{image.data or ''}"


def image_from_url(url: str, detail: str | None) -> Image:
    inline = data_url(url)
    if inline is not None:
        return Image(data=inline[1], media_type=inline[0], detail=detail)
    return Image(url=url, detail=detail)


def document_from(file_data: Any, file_url: Any, filename: Any, path: str) -> Document:
    """A file part of OpenAI's APIs (chat's ``file``, Responses' ``input_file``): its bytes as a data URL, or
    (Responses) its URL; one given by ``file_id`` lives in OpenAI's storage, which no other provider reads."""
    name = opt_str(filename, f"{path}.filename")
    if file_data is not None:
        inline = data_url(as_str(file_data, f"{path}.file_data"))
        if inline is None:
            raise bad(f"{path}.file_data", "a base64 data URL")
        return Document(data=inline[1], media_type=inline[0], filename=name)
    if file_url is not None:
        return Document(url=as_str(file_url, f"{path}.file_url"), filename=name)
    raise Untranslatable(f"{path}.file_id", "other", "a file by id")


def document_url(document: Document) -> str:
    """A document's bytes as a data URL (what OpenAI's APIs take inline)."""
    return f"data:{document.media_type or 'application/pdf'};base64,{document.data or ''}"


def document_name(document: Document) -> str:
    """A document's file name (OpenAI's APIs ask one with inline bytes): its own, else one its type suggests."""
    if document.filename:
        return document.filename
    return "document.pdf" if (document.media_type or "application/pdf") == "application/pdf" else "document"


def dump_json(value: Any) -> str:
    """JSON text as the translators write it everywhere: compact, key order kept, so it is the same every turn."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one (reading an answer: a missing member is an empty one)."""
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int:
    """``value`` if it is an integer, else 0 (reading a reported token count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def read_function(spec: dict[str, Any], path: str, cache: dict[str, Any] | None = None) -> Tool:
    """OpenAI's function, at ``path``: the same fields in both APIs (chat's ``tools[].function``, a Responses
    ``function`` tool itself); ``cache``: the tool's ``cache_control`` (chat's, for an Anthropic provider)."""
    parameters = spec.get("parameters")
    return Tool(
        as_str(spec.get("name"), f"{path}.name"),
        opt_str(spec.get("description"), f"{path}.description"),
        as_dict(parameters, f"{path}.parameters") if parameters is not None else None,
        opt_bool(spec.get("strict"), f"{path}.strict"),
        cache,
    )


def read_function_choice(choice: Any, *, nested: bool) -> ToolChoice | None:
    """OpenAI's ``tool_choice``: a mode, or a named function (chat nests its name in ``function``, the
    Responses API does not: ``nested``)."""
    if choice is None:
        return None
    if choice in ("auto", "none", "required"):
        return ToolChoice(choice)
    spec = as_dict(choice, "tool_choice")
    if spec.get("type") == "allowed_tools":
        inner = as_dict(spec.get("allowed_tools"), "tool_choice.allowed_tools") if nested else spec
        return _allowed_tools(inner, nested)
    if spec.get("type") != "function":
        raise Untranslatable("tool_choice.type", "other", f"tool choice {spec.get('type')!r}")
    if nested:
        return ToolChoice("tool", as_str(as_dict(spec.get("function"), "tool_choice.function").get("name"), "name"))
    return ToolChoice("tool", as_str(spec.get("name"), "tool_choice.name"))


def _allowed_tools(spec: dict[str, Any], nested: bool) -> ToolChoice:
    """An ``allowed_tools`` choice (chat nests it in ``allowed_tools``, Responses does not): functions and custom tools
    (which go out as functions of the same name), by name; a built-in tool is refused."""
    where = "tool_choice.allowed_tools" if nested else "tool_choice"
    mode = spec.get("mode")
    if mode not in ("auto", "required"):
        raise bad(f"{where}.mode", "'auto' or 'required'")
    names = []
    for index, raw in enumerate(as_list(spec.get("tools"), f"{where}.tools")):
        tool = as_dict(raw, f"{where}.tools[{index}]")
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            raise Untranslatable(f"{where}.tools[{index}].type", "other", f"an allowed {kind!r} tool")
        function = as_dict(tool.get(kind), f"{where}.tools[{index}].{kind}") if nested else tool
        names.append(as_str(function.get("name"), f"{where}.tools[{index}].name"))
    return ToolChoice(mode, allowed=names)


def write_function_choice(choice: ToolChoice, *, nested: bool) -> Any:
    """``choice`` as OpenAI's ``tool_choice`` (chat nests a function's name, and an allowed list, one level deeper)."""
    if choice.allowed is not None:
        if nested:
            tools = [{"type": "function", "function": {"name": name}} for name in choice.allowed]
            return {"type": "allowed_tools", "allowed_tools": {"mode": choice.mode, "tools": tools}}
        tools = [{"type": "function", "name": name} for name in choice.allowed]
        return {"type": "allowed_tools", "mode": choice.mode, "tools": tools}
    if choice.mode != "tool":
        return choice.mode
    named = {"function": {"name": choice.name}} if nested else {"name": choice.name}
    return {"type": "function", **named}


def read_json_schema(spec: dict[str, Any], path: str) -> OutputFormat:
    """OpenAI's ``json_schema`` output format, at ``path``: the same object in both APIs (chat's
    ``response_format.json_schema``; Responses' ``text.format``, beside its ``type``)."""
    return OutputFormat(
        "json_schema",
        opt_str(spec.get("name"), f"{path}.name"),
        as_dict(spec.get("schema") or {}, f"{path}.schema"),
        opt_bool(spec.get("strict"), f"{path}.strict"),
        opt_str(spec.get("description"), f"{path}.description"),
    )


def write_json_schema(output: OutputFormat) -> dict[str, Any]:
    """``read_json_schema`` backwards: the object chat nests in ``json_schema``, Responses spreads beside ``type``."""
    spec: dict[str, Any] = {"name": output.name or "output"}
    if output.description is not None:
        spec["description"] = output.description
    spec["schema"] = output.schema or {}
    if output.strict is not None:
        spec["strict"] = output.strict
    return spec


def openai_user(user: str) -> str:
    """A user id as OpenAI's APIs take it (``user`` holds at most 64 characters): a longer one, such as Claude
    Code's ``metadata.user_id`` (a JSON object of some 130), as its hex SHA-256, the same every turn."""
    return user if len(user) <= 64 else hashlib.sha256(user.encode()).hexdigest()


def write_openai_labels(conversation: Conversation, body: dict[str, Any]) -> None:
    """The request's labels as both OpenAI APIs take them, the same three fields: who asks (``openai_user``), the
    client's ``metadata`` and the ``prompt_cache_key``."""
    if conversation.user is not None:
        body["user"] = openai_user(conversation.user)
    if conversation.metadata is not None:
        body["metadata"] = conversation.metadata
    if conversation.prompt_cache_key is not None:
        body["prompt_cache_key"] = conversation.prompt_cache_key


def write_tool(tool: Tool, schema_key: str = "parameters") -> dict[str, Any]:
    """A function tool as each API describes one: its name, its description if any, its parameters' schema (an empty
    object's where it has none) under ``schema_key`` (the Messages API's ``input_schema``), its ``strict`` if set."""
    out: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        out["description"] = tool.description
    out[schema_key] = tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
    if tool.strict is not None:
        out["strict"] = tool.strict
    return out
