"""The demo's provider profiles reproduce the published figures they cite."""

from __future__ import annotations

import math

import pytest

from gateway.fakes.profiles import DEMO_PROFILES, Z95, Z99, ServingFigures, fit_sigma, profile, published_rows


def _all_figures() -> list[ServingFigures]:
    figures = [p.figures for p in DEMO_PROFILES]
    figures += [p.degraded for p in DEMO_PROFILES if p.degraded is not None]
    return figures


@pytest.mark.parametrize("figures", _all_figures())
def test_log_normal_spread_lands_near_the_published_tails(figures: ServingFigures) -> None:
    # The fake multiplies the median by lognormvariate(0, sigma): quantile z sits at median * exp(z * sigma).
    tps_p95 = figures.tps_p50 * math.exp(-Z95 * figures.tps_sigma)
    tps_p99 = figures.tps_p50 * math.exp(-Z99 * figures.tps_sigma)
    ttft_p95 = figures.ttft_p50_s * math.exp(Z95 * figures.ttft_sigma)
    assert tps_p95 == pytest.approx(figures.tps_p95_floor, rel=0.3)
    assert tps_p99 == pytest.approx(figures.tps_p99_floor, rel=0.3)
    assert ttft_p95 == pytest.approx(figures.ttft_p95_s, rel=1e-9)


def test_profiles_have_distinct_trade_offs() -> None:
    by_name = {p.name: p.figures for p in DEMO_PROFILES}
    assert by_name["nimble"].ttft_p50_s < by_name["torrent"].ttft_p50_s
    assert by_name["nimble"].tps_p50 < by_name["torrent"].tps_p50
    assert by_name["bargain"].price_per_1m == min(f.price_per_1m for f in by_name.values())
    assert by_name["bargain"].behavior().status == 503 and by_name["steady"].behavior().status == 200
    assert by_name["steady"].price_per_1m == max(f.price_per_1m for f in by_name.values())
    degraded = profile("fading").degraded
    assert degraded is not None and degraded.tps_p50 < by_name["fading"].tps_p50 / 2
    with pytest.raises(KeyError, match="known: nimble"):
        profile("nope")


def test_fit_sigma_is_exact_for_one_point() -> None:
    assert fit_sigma(1.0, [(Z95, math.exp(Z95 * 0.5))]) == pytest.approx(0.5)
    assert fit_sigma(100.0, [(-Z95, 100.0)]) == 0.0


def test_the_published_figures_ship_with_the_package_and_state_their_sources() -> None:
    rows = published_rows()
    a = [row for (source, _), row in rows.items() if source == "A"]
    b = [row for (source, _), row in rows.items() if source == "B"]
    assert len(a) == 10 and len(b) == 13
    for row in a:  # floors below the median, as a floor must be
        assert float(row["tps_p50"]) > float(row["tps_p95_floor"]) > float(row["tps_p99_floor"]) > 0
    for row in b:
        assert float(row["ttft_p50_s"]) > 0 and float(row["price_per_1m_usd"]) > 0
    from gateway.fakes.profiles import PROFILES_CSV

    header = [line for line in PROFILES_CSV.read_text().splitlines() if line.startswith("#")]
    assert any(line.startswith("# Source A:") for line in header) and any(
        line.startswith("# Source B:") for line in header
    )
    # The profiles' figures are the file's: nimble streams at Novita AI's published median.
    assert profile("nimble").figures.tps_p50 == float(rows[("A", "Novita AI")]["tps_p50"])
