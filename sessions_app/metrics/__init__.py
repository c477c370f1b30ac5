"""``/metrics`` for Prometheus (issue 18): what is collected is in :mod:`.collector`,
what is cached between scrapes in :mod:`.probes`.

:func:`render` returns the page in the Prometheus text format
(``prometheus_client.generate_latest``), from a registry of this module's own:
the library's default registry (process and Python figures of whichever worker
answers) is left out, so every scrape shows the same series whichever gunicorn
worker serves it.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .collector import HermesCollector

REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(HermesCollector())


def render() -> tuple[bytes, str]:
    """``(body, content type)`` of one scrape."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
