"""Fakes the project owns: an OpenAI-compatible provider whose speed and faults are set per
server or per request, shared by the demo, the tests and the benchmarks."""

from gateway.fakes.provider import FakeBehavior, FakeProvider

__all__ = ["FakeBehavior", "FakeProvider"]
