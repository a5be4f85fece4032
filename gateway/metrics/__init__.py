"""Metrics: what the gateway measured, routed and suffered, as Prometheus series.

``series`` holds the ``gateway_*`` families (``Metrics``, a sample sink and an events listener);
``plain`` their lock-free values for one process; ``host`` the multiprocess variant under
``--workers N`` and its scrape; ``genai`` OpenTelemetry's GenAI client series, when on.
"""
