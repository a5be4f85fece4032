"""The pinned tokenizer that counts output tokens, loadable by name or from a local file.

Every provider's own ``usage`` uses its own tokenizer, so those counts are not comparable
across providers; the gateway counts every answer with one encoding instead. The encoding is
named in the config (``stats.tokenizer``): either a tiktoken name (``o200k_base``) or a path to
a ``.tiktoken`` rank file.

A name never needs the network for the encodings the package ships (``o200k_base`` and
``cl100k_base``, in ``gateway/data/encodings``): when tiktoken's cache (``TIKTOKEN_CACHE_DIR``,
else its default folder) holds the file, tiktoken loads it as usual; when it does not, the
shipped copy is loaded instead of downloading it. Either way the file's sha256 is the one
tiktoken pins and the encoding (split pattern, special tokens) is tiktoken's own, so the counts
are identical. Other names go to tiktoken, which may download them.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import tiktoken

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
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
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
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    },
}
ENCODINGS_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
"""Where tiktoken downloads a rank file from; the sha1 of this URL is the file's name in its cache."""
BUNDLED = resources.files("gateway").joinpath("data", "encodings")
"""The shipped rank files, ``<name>.tiktoken.gz``."""


class TokenizerError(ValueError):
    """The configured tokenizer cannot be loaded; the message says which and why."""


class TokenCounter:
    """Counts tokens of text with one encoding. Thread-safe; create once per process.

    The encoding is made lean: its Python copy of the rank table (a dict of every token's bytes, which
    tiktoken keeps only to pickle an encoding by value) is dropped, the compiled tokenizer keeps its own. The
    counts are the same; what stays resident is smaller (``benchmarks/results``: the idle RSS).
    """

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        _drop_python_ranks(encoding)
        self.encoding = encoding
        self.name: str = encoding.name
        self._encode_ordinary = encoding._core_bpe.encode_ordinary
        """The compiled tokenizer's own ``encode_ordinary``, which ``Encoding.encode_ordinary`` calls: called here
        directly (a Python frame fewer per answer); text it cannot take goes through the wrapper, as before."""

    def count(self, text: str) -> int:
        # encode_ordinary: text that happens to contain "<|endoftext|>" is counted as plain text
        # instead of raising, as a model's answer may well quote it.
        if not text:
            return 0
        try:
            return len(self._encode_ordinary(text))
        except UnicodeEncodeError:
            return len(self.encoding.encode_ordinary(text))  # a lone surrogate: tiktoken replaces it, then counts


def _drop_python_ranks(encoding: tiktoken.Encoding) -> None:
    """Let go of ``encoding``'s Python rank table: encoding reads only the compiled one (``_core_bpe``), built from
    it when the encoding was made. Only pickling an unregistered encoding by value reads it; the gateway never does.
    """
    encoding._mergeable_ranks = {}


def _is_path(spec: str) -> bool:
    return "/" in spec or "\\" in spec or spec.endswith(".tiktoken")


def tiktoken_cache_file(name: str) -> Path | None:
    """Where tiktoken's cache keeps ``name``'s rank file (as ``tiktoken.load.read_file_cached`` finds
    it), or None when its cache is turned off (``TIKTOKEN_CACHE_DIR=""``)."""
    folder = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if folder is None:
        folder = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if folder == "":
        return None
    return Path(folder) / hashlib.sha1(ENCODINGS_URL.format(name=name).encode()).hexdigest()


def _cached(name: str) -> bool:
    """tiktoken's cache holds ``name``'s file intact, so ``tiktoken.get_encoding`` will not download."""
    path = tiktoken_cache_file(name)
    try:
        return path is not None and hashlib.sha256(path.read_bytes()).hexdigest() == _FILE_ENCODINGS[name]["sha256"]
    except OSError:
        return False


def bundled_ranks(name: str) -> bytes:
    """The shipped rank file of ``name``, uncompressed, checked against tiktoken's pinned sha256."""
    data = gzip.decompress(BUNDLED.joinpath(f"{name}.tiktoken.gz").read_bytes())
    if hashlib.sha256(data).hexdigest() != _FILE_ENCODINGS[name]["sha256"]:
        raise TokenizerError(f"the shipped {name} rank file is damaged (sha256 mismatch): reinstall the gateway")
    return data


def _parse_ranks(data: bytes) -> dict[bytes, int]:
    """A ``.tiktoken`` file's content: one ``base64(token) rank`` per line (as ``load_tiktoken_bpe`` reads it)."""
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def _encoding(name: str, ranks: dict[bytes, int]) -> tiktoken.Encoding:
    spec = _FILE_ENCODINGS[name]
    return tiktoken.Encoding(
        name=name, pat_str=spec["pat_str"], mergeable_ranks=ranks, special_tokens=spec["special_tokens"]
    )


def _encoding_from_file(path: Path) -> tiktoken.Encoding:
    # Read and parsed here rather than by ``tiktoken.load.load_tiktoken_bpe``, which would also copy
    # the file into tiktoken's cache folder (it caches local paths like downloads).
    try:
        ranks = _parse_ranks(path.read_bytes())
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
    return _encoding(name, ranks)


@functools.lru_cache(maxsize=8)
def load_token_counter(spec: str) -> TokenCounter:
    """Load the encoding named by ``spec`` (a tiktoken name or a file path); cached per process."""
    if _is_path(spec):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise TokenizerError(f"tokenizer file not found: {path}")
        return TokenCounter(_encoding_from_file(path))
    if spec in _FILE_ENCODINGS and not _cached(spec):
        return TokenCounter(_encoding(spec, _parse_ranks(bundled_ranks(spec))))
    try:
        return TokenCounter(tiktoken.get_encoding(spec))
    except ValueError as exc:
        raise TokenizerError(f'unknown tokenizer "{spec}": {exc}') from exc
    except OSError as exc:
        raise TokenizerError(
            f'cannot load tokenizer "{spec}" (offline?): set TIKTOKEN_CACHE_DIR to a folder holding it, '
            f"or set stats.tokenizer to the path of a .tiktoken file"
        ) from exc
