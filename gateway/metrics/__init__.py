"""Metrics: what the gateway measured, routed and suffered, as Prometheus series.

``series`` holds ``Metrics`` (a sample sink and an events listener), which joins the ``gateway_*``
families of ``attempts`` (requests, attempts), ``routing`` (routing, provider health) and
``window`` (the stats store), over ``family``'s shared base;
``plain`` their lock-free values for one process; ``host`` the multiprocess variant under
``--workers N`` and its scrape; ``genai`` OpenTelemetry's GenAI client series, when on.
"""
