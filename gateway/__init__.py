"""gateway: an OpenAI-compatible routing proxy that measures every response it relays."""

__version__ = "0.1.0"
