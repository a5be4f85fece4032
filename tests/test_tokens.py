"""The pinned tokenizer: by name or from a local rank file, with identical counts, and offline."""

from __future__ import annotations

import hashlib
import inspect
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public

import gateway.tokens
from gateway.fakes.provider import WORDS, answer_words
from gateway.tokens import TokenizerError, bundled_ranks, load_token_counter, tiktoken_cache_file

NAMES = ["o200k_base", "cl100k_base"]
# tiktoken's cache keys (sha1 of the download URL) of the two encodings shipped with the package.
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


@pytest.fixture
def fresh_loads() -> Iterator[None]:
    """Each load in the test really loads (the per-process cache is emptied before and after)."""
    load_token_counter.cache_clear()
    yield
    load_token_counter.cache_clear()


@pytest.fixture
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt of tiktoken's to fetch a file fails the test (this machine is offline anyway)."""

    def refuse(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)


def cache_folder(tmp_path: Path, *names: str) -> Path:
    """A tiktoken cache folder holding the shipped files of ``names`` under tiktoken's own keys."""
    folder = tmp_path / "tiktoken-cache"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / CACHE_FILES[name]).write_bytes(bundled_ranks(name))
    return folder


def tiktokens_own(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tiktoken.Encoding:
    """The encoding exactly as tiktoken builds it (its constructor, pattern and special tokens), from a cache."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache_folder(tmp_path, name)))
    return tiktoken.Encoding(**tiktoken_ext.openai_public.ENCODING_CONSTRUCTORS[name]())


def cache_file(name: str, tmp_path: Path) -> Path:
    return cache_folder(tmp_path, name) / CACHE_FILES[name]


@pytest.mark.parametrize("name", NAMES)
def test_the_shipped_files_are_the_ones_tiktoken_pins(name: str) -> None:
    # The sha256 tiktoken's own source pins for the download is the shipped file's.
    source = inspect.getsource(tiktoken_ext.openai_public)
    pinned = re.search(rf"encodings/{name}\.tiktoken\",\s*expected_hash=\"([0-9a-f]{{64}})\"", source)
    assert pinned is not None
    assert hashlib.sha256(bundled_ranks(name)).hexdigest() == pinned.group(1)
    cached = tiktoken_cache_file(name)
    assert cached is not None and cached.name == CACHE_FILES[name]


@pytest.mark.parametrize("name", NAMES)
def test_a_name_loads_offline_from_the_shipped_file_when_the_cache_lacks_it(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_loads: None, no_downloads: None
) -> None:
    expected = tiktokens_own(name, monkeypatch, tmp_path / "reference")
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    counter = load_token_counter(name)
    assert counter.name == name
    for text in TEXTS:
        assert counter.encoding.encode_ordinary(text) == expected.encode_ordinary(text)
    assert counter.encoding.encode("<|endoftext|>", allowed_special="all") == expected.encode(
        "<|endoftext|>", allowed_special="all"
    )
    assert counter.encoding.special_tokens_set == expected.special_tokens_set
    assert list(empty.iterdir()) == []  # nothing written to the user's cache


def test_a_damaged_cache_file_is_not_trusted_and_nothing_is_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_loads: None, no_downloads: None
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / CACHE_FILES["o200k_base"]).write_bytes(b"YQ== 0\n")  # wrong sha256: tiktoken would re-download
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    assert load_token_counter("o200k_base").count("Hello, world!") == 4


def test_a_cache_that_holds_the_file_is_read_by_tiktoken_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_loads: None, no_downloads: None
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache_folder(tmp_path, "o200k_base")))

    def unused(name: str) -> bytes:
        raise AssertionError("the shipped file was read although tiktoken's cache holds the encoding")

    monkeypatch.setattr(gateway.tokens, "bundled_ranks", unused)
    assert load_token_counter("o200k_base").count("Hello, world!") == 4


def test_a_turned_off_cache_uses_the_shipped_file(
    monkeypatch: pytest.MonkeyPatch, fresh_loads: None, no_downloads: None
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken's way of saying: always download
    assert tiktoken_cache_file("o200k_base") is None
    assert load_token_counter("o200k_base").count("Hello, world!") == 4


@pytest.mark.parametrize("name", NAMES)
def test_name_and_file_give_identical_tokens(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch, fresh_loads: None, no_downloads: None
) -> None:
    untouched = tmp_path / "users-cache"
    untouched.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(untouched))
    by_name = load_token_counter(name)
    named_file = tmp_path / f"{name}.tiktoken"
    named_file.write_bytes(bundled_ranks(name))
    by_file = load_token_counter(str(named_file))
    # A file named only by its cache key is recognised by its number of ranks.
    by_cache_key = load_token_counter(str(cache_file(name, tmp_path)))
    assert by_name.name == by_file.name == by_cache_key.name == name
    for text in TEXTS:
        expected = by_name.encoding.encode_ordinary(text)
        assert by_file.encoding.encode_ordinary(text) == expected
        assert by_cache_key.encoding.encode_ordinary(text) == expected
        assert by_name.count(text) == by_file.count(text) == by_cache_key.count(text) == len(expected)
    # Special tokens are known to the file-loaded encoding too (same ids as tiktoken's own).
    assert list(untouched.iterdir()) == []  # loading a file by path copies nothing into tiktoken's cache
    reference = tiktokens_own(name, monkeypatch, tmp_path / "reference")
    assert by_file.encoding.encode("<|endoftext|>", allowed_special="all") == reference.encode(
        "<|endoftext|>", allowed_special="all"
    )


def test_counter_counts_special_token_text_as_plain_text() -> None:
    counter = load_token_counter("o200k_base")
    assert counter.count("<|endoftext|>") > 1
    assert counter.count("") == 0


@pytest.mark.parametrize("name", NAMES)
def test_the_count_is_the_length_of_tiktokens_encode_ordinary(name: str) -> None:
    """``count`` calls the compiled tokenizer directly (text with a lone surrogate through tiktoken's wrapper, as
    before): the same count as ``len(encoding.encode_ordinary(text))`` on random text of every kind."""
    counter = load_token_counter(name)
    rng = random.Random(name)
    pieces = [*TEXTS, "\ud800", "\udfff", "x\ud83d", "<|endoftext|>", " ", "\n", "é", "🎉", "'s", "123", "\r\n"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        if rng.random() < 0.2:
            text += "".join(chr(rng.randrange(0x20, 0x30000)) for _ in range(rng.randrange(20)))
        assert counter.count(text) == len(counter.encoding.encode_ordinary(text)), repr(text)
    assert counter.count("a \ud800 b") == len(counter.encoding.encode_ordinary("a \ufffd b"))  # replaced, then counted


@pytest.mark.parametrize("name", NAMES)
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


@pytest.mark.parametrize("name", NAMES)
def test_the_lean_counter_counts_as_tiktokens_whole_encoding(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_loads: None
) -> None:
    """The counter lets go of tiktoken's Python rank table (a resident dict of every token); its counts stay."""
    counter = load_token_counter(name)
    assert counter.encoding._mergeable_ranks == {}  # the table is gone from the counter's encoding
    reference = tiktokens_own(name, monkeypatch, tmp_path)
    assert len(reference._mergeable_ranks) > 100_000  # the whole encoding, as tiktoken builds it
    long_text = " ".join(TEXTS) * 20
    for text in [*TEXTS, long_text, "".join(answer_words(0, len(WORDS)))]:
        assert counter.encoding.encode_ordinary(text) == reference.encode_ordinary(text)
        assert counter.count(text) == len(reference.encode_ordinary(text))
