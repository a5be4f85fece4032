"""``GET /dashboard`` over real HTTP: its access rule (the same as ``/v1/gateway/stats``, plus the
``?key=`` → cookie hand-off for browsers), its security headers, and that no key is echoed."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

KEY = "sk-dashboard-test-key"
WRONG = "sk-not-a-key-0000"


def test_without_client_keys_loopback_gets_the_page_with_a_strict_policy(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    gateway = start_gateway(gateway_config([fakes.start("first"), fakes.start("second")]))
    page = httpx.get(gateway.url + "/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "No traffic measured yet" in page.text and "Authorization" not in page.text
    policy = page.headers["content-security-policy"]
    nonce = re.search(r"script-src 'nonce-([^']+)'", policy)
    assert nonce is not None and f'<script nonce="{nonce.group(1)}">' in page.text
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    assert httpx.get(gateway.url + "/dashboard").headers["content-security-policy"] != policy  # a nonce per page

    sdk(gateway.base_url).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    wait_until(lambda: len(gateway.samples.samples) >= 1, what="the sample")
    page = httpx.get(gateway.url + "/dashboard")
    assert '<span class="dep">first</span>' in page.text and "1 sample in 5 min" in page.text
    # Today's router follows the config: the page says so, and names the first deployment.
    assert re.search(
        r'next request goes to <span class="chip"[^>]*>first</span><span class="basis"[^>]*>config order', page.text
    )


def test_with_client_keys_a_browser_hands_over_its_key_once(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    gateway = start_gateway(gateway_config([fakes.start("p")]), environ={"GATEWAY_API_KEYS": f"{KEY},other"})
    with httpx.Client(base_url=gateway.url) as browser:
        refused = browser.get("/dashboard")
        assert refused.status_code == 401 and refused.headers["content-type"].startswith("text/html")
        assert "needs a client key" in refused.text and "/dashboard?key=" in refused.text

        wrong = browser.get("/dashboard", params={"key": WRONG})
        assert wrong.status_code == 401 and "invalid API key" in wrong.text
        assert WRONG not in wrong.text + str(wrong.headers) and not browser.cookies

        handed = browser.get("/dashboard", params={"key": KEY})
        assert handed.status_code == 303 and handed.headers["location"] == "/dashboard"
        cookie = handed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/dashboard" in cookie
        assert "max-age" not in cookie and "expires" not in cookie  # a session cookie
        assert handed.headers["referrer-policy"] == "no-referrer"

        page = browser.get("/dashboard")  # the cookie now stands for the key
        assert page.status_code == 200 and 'id="board"' in page.text and KEY not in page.text
        assert "Authorization: Bearer $GATEWAY_API_KEY" in page.text

    # Tools send the key as a header, like for /v1/gateway/stats; a stale cookie is refused.
    assert httpx.get(gateway.url + "/dashboard", headers={"authorization": "Bearer other"}).status_code == 200
    assert httpx.get(gateway.url + "/dashboard", cookies={"gateway_dashboard_key": WRONG}).status_code == 401


def test_the_root_address_leads_a_browser_to_the_dashboard(fakes: Fakes, start_gateway: Callable[..., Gateway]) -> None:
    gateway = start_gateway(gateway_config([fakes.start("p")]), environ={"GATEWAY_API_KEYS": KEY})
    bare = httpx.get(gateway.url + "/")
    assert bare.status_code == 307 and bare.headers["location"] == "/dashboard"
    # A key handed to the root address goes along, and the usual hand-off follows.
    followed = httpx.get(gateway.url + "/", params={"key": KEY}, follow_redirects=True)
    assert followed.status_code == 200 and str(followed.url) == gateway.url + "/dashboard"
    assert "No traffic measured yet" in followed.text
    assert httpx.post(gateway.url + "/").status_code == 405
