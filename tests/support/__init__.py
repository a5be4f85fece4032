"""What the tests share, so that each test states only what it is about.

- ``clock``: ``FakeClock``, a clock the test moves by hand.
- ``wait``: ``wait_until``, polling a condition with a deadline (never a bare sleep).
- ``servers``: ``ServerThread``, a real uvicorn on a free loopback port, in a thread.
- ``fakes``: ``Fakes``/``FakeServer``, the project's fake provider on such a server.
- ``config``: ``gateway_config``, the one config builder (overrides for policy, deployments, the rest).
- ``gateway``: ``Gateway``/``GatewayServers``, a gateway app served on loopback, its runtime at hand.
- ``clients``: the OpenAI SDK clients the end-to-end tests use, and response comparison helpers.
- ``samples``: ``sample``/``samples``, ``Sample`` values with known numbers for routing and stats tests.
"""
