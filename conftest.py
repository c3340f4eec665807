import pytest

pytest_plugins = ["harness.pytest_plugin"]


@pytest.fixture
def without_vendor_adapters(monkeypatch):
    """The harness runs a machinery test starts in subprocesses load no vendor adapter (vLLM's,
    SGLang's, AITER's imports take about 20 s a process): for tests whose subject is the
    harness's own verdicts, not a vendor. ``HARNESS_ADAPTERS`` is the documented switch."""
    monkeypatch.setenv("HARNESS_ADAPTERS", "none")
