"""The check catalog in run order: one instance per stable code (docs/architecture.md §4.

Order matters a little: access checks first (the runner emits them), then the
structural pass (``quick_check``) whose result the FTS checks reuse, then the
cheap set-based checks, then the walk-based and file-based ones.
"""

from __future__ import annotations

from typing import Iterable

from . import files, history, lifecycle, lineage, ownership, store, transcript
from .base import Check

CATALOG: tuple[Check, ...] = (
    # store level
    store.StoreUnreadable(),
    store.StoreBusy(),
    store.StoreCorrupt(),
    store.SchemaMalformed(),
    store.SchemaOutdated(),
    store.FtsDamaged(),
    store.FtsIncomplete(),
    files.WalOversized(),
    files.WalGenerationSplit(),
    files.RepairLeftovers(),
    store.StaleLease(),
    store.OrphanDependents(),
    # session level
    transcript.OrphanMessages(),
    lineage.DanglingParent(),
    lineage.LineageCycle(),
    lineage.CompressionWithoutContinuation(),
    lineage.MultipleContinuations(),
    transcript.UnansweredTurn(),
    files.TranscriptOnDiskOnly(),
    history.HistoryLost(),
    transcript.CounterDrift(),
    transcript.UsageWithoutTranscript(),
    transcript.OrphanToolResult(),
    transcript.UnansweredToolCall(),
    transcript.DuplicateLiveRows(),
    transcript.TimestampDisorder(),
    lifecycle.StaleOpen(),
    ownership.MissingOwner(),
    ownership.OwnerMismatch(),
    ownership.IdCollision(),
    ownership.MissingRoutingIdentity(),
    files.LeftoverFiles(),
    lifecycle.PlaceholderSession(),
)

BY_CODE: dict[str, Check] = {check.code: check for check in CATALOG}


def codes() -> list[str]:
    """Every stable code, in catalog order."""
    return [check.code for check in CATALOG]


def light_codes() -> list[str]:
    """Codes of the cheap store-level checks (``Check.light``), in catalog order:
    what ``watch_stores`` runs on every cycle (``--only`` of its light passes)."""
    return [check.code for check in CATALOG if check.light]


def get(code: str) -> Check:
    """The check for ``code``; KeyError for an unknown code."""
    return BY_CODE[code]


def select(only: Iterable[str] | None = None) -> list[Check]:
    """Checks to run, in catalog order. Raises ValueError naming unknown codes
    (``heal_sessions --only`` turns that into exit 2)."""
    if only is None:
        return list(CATALOG)
    wanted = {c.strip() for c in only if c and c.strip()}
    unknown = sorted(wanted - set(BY_CODE))
    if unknown:
        raise ValueError(f"unknown check code(s): {', '.join(unknown)}")
    return [check for check in CATALOG if check.code in wanted]


def choices() -> list[tuple[str, str]]:
    """``(code, "Title (code)")`` for every check, by title: the health filter's
    options (the code stays the value, so URLs and ``--only`` keep working)."""
    return sorted(((c.code, f"{c.title} ({c.code})") for c in CATALOG), key=lambda pair: pair[1].lower())


def next_step_of(finding) -> str:
    """What to do about ``finding`` (a ``Finding`` or a stored report's finding dict)
    when it carries no repair: its check's ``next_step_for`` its ``next_step_case``;
    "" when it has a repair or its check is not in the catalog (an older run's)."""
    data = finding if isinstance(finding, dict) else vars(finding)
    check = BY_CODE.get(data.get("check"))
    return check.next_step_for(data.get("next_step_case") or "") if check and not data.get("heal") else ""


def catalog() -> list[dict]:
    """Catalog entries (code, severity, title, explanation, next_step, heal, scope) for the UI."""
    return [check.describe() for check in CATALOG]
