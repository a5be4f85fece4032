"""The pinned tokenizer: by name or from a local rank file, with identical counts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import tiktoken

from gateway.fakes.provider import WORDS, answer_words
from gateway.tokens import TokenizerError, load_token_counter

# tiktoken's cache keys (sha1 of the download URL) of the two encodings shipped offline.
CACHE_FILES = {
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
}
TEXTS = [
    "",
    "Hello, world! How are you doing today?",
    "def f(x):\n    return x ** 2  # squares\n\n\tindented\r\n",
    "Ünïcödé – 日本語のテキスト, emojis 🎉🚀 and numbers 1234567 3.14159",
    "a model may quote <|endoftext|> or <|endofprompt|> in its answer",
    "   leading and trailing spaces   \n\n\n",
    "I'm sure you'll see they've done it, haven't they? WE'RE HERE",
]


def cache_file(name: str) -> Path:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    assert cache_dir, "TIKTOKEN_CACHE_DIR must point at the offline encodings (see ../shared/tiktoken/README.md)"
    path = Path(cache_dir) / CACHE_FILES[name]
    assert path.is_file(), f"{path} is missing"
    return path


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_name_and_file_give_identical_tokens(tmp_path: Path, name: str) -> None:
    by_name = load_token_counter(name)
    named_file = tmp_path / f"{name}.tiktoken"
    shutil.copyfile(cache_file(name), named_file)
    by_file = load_token_counter(str(named_file))
    # A file named only by its cache key is recognised by its number of ranks.
    by_cache_key = load_token_counter(str(cache_file(name)))
    assert by_name.name == by_file.name == by_cache_key.name == name
    for text in TEXTS:
        expected = by_name.encoding.encode_ordinary(text)
        assert by_file.encoding.encode_ordinary(text) == expected
        assert by_cache_key.encoding.encode_ordinary(text) == expected
        assert by_name.count(text) == by_file.count(text) == by_cache_key.count(text) == len(expected)
    # Special tokens are known to the file-loaded encoding too (same ids as tiktoken's own).
    assert by_file.encoding.encode("<|endoftext|>", allowed_special="all") == tiktoken.get_encoding(name).encode(
        "<|endoftext|>", allowed_special="all"
    )


def test_counter_counts_special_token_text_as_plain_text() -> None:
    counter = load_token_counter("o200k_base")
    assert counter.count("<|endoftext|>") > 1
    assert counter.count("") == 0


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_fake_provider_words_are_one_token_each(name: str) -> None:
    """The fake's answers count exactly: the meter's expected token counts rely on it."""
    counter = load_token_counter(name)
    for word in answer_words(0, len(WORDS)):
        assert counter.count(word) == 1, word
    assert counter.count("".join(answer_words(3, 50))) == 50


def test_counter_is_cached_per_spec() -> None:
    assert load_token_counter("o200k_base") is load_token_counter("o200k_base")


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(TokenizerError, match=r'^unknown tokenizer "o300k_base": '):
        load_token_counter("o300k_base")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "o200k_base.tiktoken"
    with pytest.raises(TokenizerError, match=r"^tokenizer file not found: .*nowhere/o200k_base\.tiktoken$"):
        load_token_counter(str(missing))


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    garbage = tmp_path / "o200k_base.tiktoken"
    garbage.write_text("this is not a rank file\n")
    with pytest.raises(TokenizerError, match=r"^cannot load tokenizer file .*o200k_base\.tiktoken: "):
        load_token_counter(str(garbage))


def test_file_of_unknown_encoding_is_a_clear_error(tmp_path: Path) -> None:
    tiny = tmp_path / "mine.tiktoken"
    tiny.write_text("YQ== 0\nYg== 1\n")
    with pytest.raises(TokenizerError, match=r"cannot tell which encoding .*mine\.tiktoken holds \(2 ranks\)"):
        load_token_counter(str(tiny))
