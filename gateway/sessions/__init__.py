"""Sessions: which deployment holds a request's state, so that the request can go back to it.

``identity`` finds which conversation a request continues; ``bindings`` is the shared store of
key → deployment with a TTL (memory, or Redis over a local cache), on which ``session_bindings``
keeps where each session's prompt is cached and ``response_owners`` which deployment created
each Responses answer.
"""
