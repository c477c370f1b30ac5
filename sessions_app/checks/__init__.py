"""The check catalog (docs/architecture.md §4: one module per family, a registry, a runner.

Public API::

    run_store_checks(store, *, only=None, other_stores=(), session_id=None, now=None) -> StoreReport
    registry.codes() / registry.select(only) / registry.catalog()
    Finding, StoreReport, Check, CheckContext, Thresholds
"""

from .base import Check, CheckContext, Finding, Thresholds
from .runner import StoreReport, run_store_checks

__all__ = ["Check", "CheckContext", "Finding", "StoreReport", "Thresholds", "run_store_checks"]
