"""Admission: who may call the gateway and within which limits, before a request is routed.

``access`` is the one place a request is authenticated, authorised and counted (it calls the
rest): ``auth`` (client keys, the admin key), ``limits`` (a request's shape, requests in flight),
``ratelimit`` (requests and tokens per minute) and ``spending`` (dollar budgets).
"""
