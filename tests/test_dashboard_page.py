"""The dashboard's HTML: rows, chart, empty state, degraded banner, and escaping of every name.

Names come from the config (models, deployments, providers), the store's reason from the
environment and the base URL from the request's Host header: none may inject markup. The
escaping tests parse the page with the standard HTML parser and check what elements and
attributes it holds, not just that some string is absent.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from html.parser import HTMLParser

from gateway.config import GatewayConfig, parse_config
from gateway.dashboard.page import render_page
from gateway.dashboard.text import seconds, speed
from gateway.dashboard.view import DashboardView, config_order_choices, model_boards
from gateway.leaderboard import leaderboard
from gateway.samples import Sample
from gateway.stats import StatsSnapshot, StoreHealth
from tests.test_dashboard_view import sample

NONCE = "test-nonce"
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;"\''


def config(models: dict[str, list[tuple[str, str]]]) -> GatewayConfig:
    """Models → (deployment name, provider name) pairs."""
    providers = sorted({p for deployments in models.values() for _, p in deployments})
    return parse_config(
        {
            "providers": [{"name": p, "base_url": "http://127.0.0.1:9/v1"} for p in providers],
            "models": [
                {
                    "name": name,
                    "deployments": [
                        {"name": d, "provider": p, "model": "up", "price_in": 0.59, "price_out": 0.79}
                        for d, p in deployments
                    ],
                }
                for name, deployments in models.items()
            ],
        },
        source="test.toml",
    )


def view(
    cfg: GatewayConfig,
    samples: Sequence[Sample],
    *,
    health: StoreHealth | None = None,
    base_url: str = "http://127.0.0.1:8080/",
    keys_required: bool = False,
) -> DashboardView:
    rows = leaderboard(StatsSnapshot.from_samples(samples), cfg.models)
    return DashboardView(
        boards=model_boards(rows, cfg.models, config_order_choices(cfg.models)),
        window_s=300,
        taken_at=1_800_000_000.0,
        backend="redis",
        health=health or StoreHealth(),
        base_url=base_url,
        keys_required=keys_required,
    )


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text, of a document."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def text_content(self) -> str:
        return "".join(self.text)


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "link", "noscript", "style", "body", "header", "div", "span", "main",
    "section", "table", "thead", "tbody", "tr", "th", "td", "small", "b", "figure", "figcaption", "svg",
    "text", "line", "path", "polyline", "g", "circle", "footer", "p", "h2", "h3", "ol", "ul", "li", "pre",
    "code", "aside", "script",
}  # fmt: skip


def assert_inert(document: str) -> Elements:
    """Only the page's own elements, no event-handler attributes, one script: the nonce'd one."""
    parsed = Elements(document)
    assert {tag for tag, _ in parsed.tags} <= ALLOWED_TAGS
    assert [attrs.get("nonce") for tag, attrs in parsed.tags if tag == "script"] == [NONCE]
    for tag, attrs in parsed.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "javascript:" not in " ".join(v or "" for v in attrs.values())
    return parsed


def test_rows_bars_and_scatter_of_a_measured_model() -> None:
    cfg = config({"llama": [("groq", "groq"), ("together", "together"), ("slow", "slowprov")]})
    samples = [sample("groq", 0.2, 400.0, model="llama")] * 6 + [sample("together", 0.5, 900.0, model="llama")] * 5
    samples += [sample("slow", 0.6, 100.0, model="llama")] + [sample("slow", None, None, model="llama", ok=False)]
    shown = view(cfg, samples)
    page = render_page(shown, nonce=NONCE)
    assert_inert(page)

    names = re.findall(r'<span class="dep">([^<]+)</span>', page)
    assert names == ["together", "groq", "slow"]  # fastest median first
    # Each row shows its leaderboard figures (histogram quantiles, within 2% of the samples).
    for d, tr in zip(shown.boards[0].deployments, re.findall(r"<tr class=.*?</tr>", page), strict=True):
        row = d.row
        assert f"<b>{speed(row.tokens_per_s_p50)}</b> tok/s" in tr and f"≥ {speed(row.tokens_per_s_p95_floor)}" in tr
        assert f"<b>{seconds(row.ttft_p50_s)}</b>" in tr and f"· {seconds(row.ttft_p95_s)}" in tr
    assert "<b>907</b> tok/s" in page and "<b>200 ms</b>" in page  # e.g. together's 900, groq's 0.2 s
    assert "46.2%" in page and "38.5%" in page and "15.4%" in page  # traffic shares of 13 samples
    assert "50.0%" in page and "$0.59 · $0.79" in page  # success of "slow", prices
    assert '<span class="provider">' not in page and "on slowprov" in page
    assert re.search(
        r'next request goes to <span class="chip"[^>]*>groq</span><span class="basis"[^>]*>config order', page
    )
    assert 'title="The router tries this model&#x27;s deployments in the order of the config' in page
    assert page.count('<g class="point on-frontier"') == 2 and page.count('<g class="point dominated"') == 0
    # "slow" has one complete answer and a timeout that may have cut a stream off: shown, marked thin (no speed
    # certainly of a complete answer), on neither side of the frontier.
    assert page.count('<g class="point thin"') == 1 and "thin: 0 complete answers, not ranked" in page
    assert "◌ thin: fewer than 5 complete answers, not compared" in page
    assert page.count('<polyline class="frontier-line"') == 1 and page.count('class="chosen-ring"') == 1
    assert "13 samples in 5 min" in page and "No traffic measured yet" not in page
    assert '<noscript><meta http-equiv="refresh" content="3"></noscript>' in page


def test_a_model_without_samples_says_so_in_words_and_draws_no_chart() -> None:
    cfg = config({"busy": [("a", "a")], "quiet": [("b", "b")]})
    page = render_page(view(cfg, [sample("a", 0.1, 50.0, model="busy")]), nonce=NONCE)
    busy, quiet = page[page.index("<h2>busy</h2>") : page.index("<h2>quiet</h2>")], page[page.index("<h2>quiet</h2>") :]
    assert "1 sample in 5 min" in busy and "1 samples" not in page
    assert "0 samples in 5 min" in quiet and "No speed samples yet" in quiet
    assert '<td class="none" colspan="4">no samples in the window</td>' in quiet
    assert "–" not in Elements(page).text_content() and "<b>–</b>" not in page  # no dash that reads as zero
    assert page.count('<svg class="scatter"') == 1


def test_empty_state_says_what_to_do() -> None:
    cfg = config({"llama-3.3-70b": [("groq", "groq"), ("together", "together")]})
    page = render_page(view(cfg, [], base_url="http://gw.example:8080/"), nonce=NONCE)
    text = " ".join(assert_inert(page).text)
    assert "No traffic measured yet" in text and "gateway demo --traffic 5" in text
    assert "curl -N http://gw.example:8080/v1/chat/completions" in text
    assert '"model": "llama-3.3-70b"' in text and "Authorization" not in text
    assert "<table" not in page and '<svg class="scatter"' not in page
    assert re.search(r"<b>llama-3.3-70b</b><span class=\"arrow\">→</span><span class=\"chip\"[^>]*>groq</span>", page)

    with_keys = render_page(view(cfg, [], keys_required=True), nonce=NONCE)
    assert "-H &quot;Authorization: Bearer $GATEWAY_API_KEY&quot;" in with_keys


def test_degraded_store_shows_a_banner() -> None:
    cfg = config({"m": [("a", "a")]})
    health = StoreHealth(degraded=True, reason="redis unreachable: <refused>", dropped_samples=12)
    page = render_page(view(cfg, [sample("a", 0.1, 50.0)], health=health), nonce=NONCE)
    assert "Stats backend degraded: redis unreachable: &lt;refused&gt;." in page
    assert "stats <b>redis</b> · degraded" in page and "<b>12</b> samples dropped" in page


def test_every_name_is_escaped_in_rows_chart_choice_and_empty_state() -> None:
    cfg = config({EVIL: [(EVIL, EVIL + "provider"), ("plain", "plain")]})
    samples = [sample(EVIL, 0.1, 300.0, model=EVIL), sample("plain", 0.2, 100.0, model=EVIL)]
    health = StoreHealth(degraded=True, reason=EVIL)
    for document in (
        render_page(view(cfg, samples, health=health, base_url=f"http://{EVIL}/"), nonce=NONCE),
        render_page(view(cfg, [], health=health, base_url=f"http://{EVIL}/"), nonce=NONCE),
    ):
        parsed = assert_inert(document)
        assert "<script>alert" not in document and "<img" not in document
        # The names still read as written, once the browser decodes the escapes.
        assert any(EVIL in text for text in parsed.text)
    populated = render_page(view(cfg, samples), nonce=NONCE)
    titles = [attrs["aria-label"] for tag, attrs in Elements(populated).tags if tag == "svg" and "aria-label" in attrs]
    assert titles == [f"Tokens per second against time to first token, {EVIL}"]


def _minute_samples(deployment: str, minute: int, speed: float, count: int = 5) -> list[tuple[Sample, float]]:
    return [(sample(deployment, 0.2, speed), 1_800_000_000.0 + minute * 60 + i) for i in range(count)]


def test_each_row_has_its_half_hour_and_the_rank_changes_are_marked() -> None:
    from gateway.dashboard.spark import rank_changes
    from gateway.stats.history import MinuteBuckets

    cfg = config({"m": [("a", "pa"), ("b", "pb"), ("c", "pc")]})
    buckets = MinuteBuckets()
    # a leads, b overtakes it clearly at minute 10, a takes the lead back at minute 20; a wobble within the
    # margin at minute 5 is not a change. c never streamed.
    story = [("a", m, 100.0) for m in range(30)]
    story += [("b", m, 105.0 if m == 5 else 95.0 if m < 10 else 150.0) for m in range(20)]
    story += [("b", m, 60.0) for m in range(20, 30)]
    for deployment, minute, tps in story:
        for s, at in _minute_samples(deployment, minute, tps):
            buckets.add(s, at)
    buckets.add(sample("c", None, None, ok=False), 1_800_000_000.0 + 29 * 60)
    now = 1_800_000_000.0 + 29 * 60 + 30
    history = buckets.points(now, [("m", "a"), ("m", "b"), ("m", "c")])
    assert rank_changes({"a": history[("m", "a")], "b": history[("m", "b")]}) == (
        1_800_000_000 + 10 * 60,
        1_800_000_000 + 20 * 60,
    )
    # A minute on too few samples to compare is no change of the lead, however fast (a race's drained loser, say).
    thin = MinuteBuckets()
    for deployment, minute, tps in [("a", m, 100.0) for m in range(3)]:
        for s, at in _minute_samples(deployment, minute, tps):
            thin.add(s, at)
    thin.add(sample("b", 0.3, 900.0), 1_800_000_000.0 + 60 + 1)
    points = thin.points(1_800_000_000.0 + 3 * 60, [("m", "a"), ("m", "b")])
    assert points[("m", "b")][0].samples == 1 and rank_changes({"a": points[("m", "a")], "b": points[("m", "b")]}) == ()
    rows = leaderboard(StatsSnapshot.from_samples([sample("a", 0.2, 100.0), sample("b", 0.3, 60.0)]), cfg.models)
    shown = DashboardView(
        boards=model_boards(rows, cfg.models, config_order_choices(cfg.models), history=history, now=now),
        window_s=300,
        taken_at=now,
        backend="memory",
        health=StoreHealth(),
        base_url="http://127.0.0.1:8080/",
        keys_required=False,
    )
    page = render_page(shown, nonce=NONCE)
    assert page.count('<svg class="spark"') == 2  # a and b; c has no streamed answer to draw
    assert "no streamed answer in 30 min" in page
    assert page.count('class="rank-change"') == 2 * 2  # both changes, on both sparklines
    assert "fastest changed 2 times in 30 min" in page
    assert "tokens/s p50 per minute: 100 to 100" in page  # the range each line is drawn on (1% histogram buckets)
    assert re.search(r"tokens/s p50 per minute: (59|60)\.\d to 150", page)


def test_success_and_traffic_count_the_same_samples_and_say_what_differs() -> None:
    cfg = config({"m": [("a", "pa"), ("b", "pb")]})
    cancelled = Sample("m", "b", "b", "chat", True, "client_cancelled", 0.0)
    samples = [sample("a", 0.1, 50.0), sample("a", 0.1, 50.0), sample("a", 0.1, 50.0, ok=False), cancelled]
    samples += [dataclasses.replace(cancelled), dataclasses.replace(cancelled)]
    page = render_page(view(cfg, samples), nonce=NONCE)
    a = page[page.index('<span class="dep">a</span>') : page.index('<span class="dep">b</span>')]
    b = page[page.index('<span class="dep">b</span>') :]
    assert "66.7%" in a and "of 3<" in a and "3 samples" in a
    # b's three samples were all cancelled: Traffic counts them, Success says why it has no rate.
    assert "none judged" in b and "3 cancelled or refused" in b and "3 samples" in b


def test_the_pictures_in_docs_show_the_current_layout() -> None:
    # docs/dashboard*.png are made by `python -m tests.dashboard_screenshot docs/dashboard.png`, which records
    # the digest of the files that decide the layout: a change to them needs new pictures.
    from tests.dashboard_screenshot import LAYOUT_RECORD, NARROW, ROOT, WIDE, layout_digest

    recorded = LAYOUT_RECORD.read_text().split()
    assert recorded == ["sha256", layout_digest()], (
        "the dashboard's layout changed since docs/dashboard*.png were made: run "
        "`python -m tests.dashboard_screenshot docs/dashboard.png` and commit the pictures"
    )
    for name, (width, _) in (("dashboard.png", WIDE), ("dashboard-narrow.png", NARROW)):
        png = (ROOT / "docs" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == width, name
