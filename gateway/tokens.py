"""The pinned tokenizer that counts output tokens, loadable by name or from a local file.

Every provider's own ``usage`` uses its own tokenizer, so those counts are not comparable
across providers; the gateway counts every answer with one encoding instead. The encoding is
named in the config (``stats.tokenizer``): either a tiktoken name (``o200k_base``), found in
tiktoken's cache (``TIKTOKEN_CACHE_DIR``) or downloaded, or a path to a ``.tiktoken`` rank
file, so that an air-gapped deployment needs no network at all.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe

# The split patterns and special tokens of the two encodings a rank file can hold. They are
# public data of OpenAI's encodings (tiktoken_ext/openai_public.py); tests check that a file
# loaded with them tokenises exactly as ``tiktoken.get_encoding`` does.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_FILE_ENCODINGS: dict[str, dict[str, Any]] = {
    "o200k_base": {
        "pat_str": _O200K_PATTERN,
        "special_tokens": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "ranks": 199998,
    },
    "cl100k_base": {
        "pat_str": _CL100K_PATTERN,
        "special_tokens": {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        "ranks": 100256,
    },
}


class TokenizerError(ValueError):
    """The configured tokenizer cannot be loaded; the message says which and why."""


class TokenCounter:
    """Counts tokens of text with one encoding. Thread-safe; create once per process."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.name: str = encoding.name

    def count(self, text: str) -> int:
        # encode_ordinary: text that happens to contain "<|endoftext|>" is counted as plain text
        # instead of raising, as a model's answer may well quote it.
        return len(self.encoding.encode_ordinary(text)) if text else 0


def _is_path(spec: str) -> bool:
    return "/" in spec or "\\" in spec or spec.endswith(".tiktoken")


def _encoding_from_file(path: Path) -> tiktoken.Encoding:
    try:
        ranks = load_tiktoken_bpe(str(path))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"cannot load tokenizer file {path}: {exc}") from exc
    name = next((known for known in _FILE_ENCODINGS if known in path.name), None)
    if name is None:
        # Files named by tiktoken's cache key (a sha1) carry no name: tell them apart by size.
        name = next((known for known, spec in _FILE_ENCODINGS.items() if spec["ranks"] == len(ranks)), None)
    if name is None:
        raise TokenizerError(
            f"cannot tell which encoding {path} holds ({len(ranks)} ranks); "
            f"name the file after one of: {', '.join(_FILE_ENCODINGS)}"
        )
    spec = _FILE_ENCODINGS[name]
    return tiktoken.Encoding(
        name=name, pat_str=spec["pat_str"], mergeable_ranks=ranks, special_tokens=spec["special_tokens"]
    )


@functools.lru_cache(maxsize=8)
def load_token_counter(spec: str) -> TokenCounter:
    """Load the encoding named by ``spec`` (a tiktoken name or a file path); cached per process."""
    if _is_path(spec):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise TokenizerError(f"tokenizer file not found: {path}")
        return TokenCounter(_encoding_from_file(path))
    try:
        return TokenCounter(tiktoken.get_encoding(spec))
    except ValueError as exc:
        raise TokenizerError(f'unknown tokenizer "{spec}": {exc}') from exc
    except OSError as exc:
        raise TokenizerError(
            f'cannot load tokenizer "{spec}" (offline?): set TIKTOKEN_CACHE_DIR to a folder holding it, '
            f"or set stats.tokenizer to the path of a .tiktoken file"
        ) from exc
