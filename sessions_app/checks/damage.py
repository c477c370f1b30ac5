"""Whether a store is known damaged, for the pages that would offer writes to it.

A damaged store gets no write control (rename, flags, heal, migration): writing can
make SQLite damage worse, and the guarded write fails there anyway ("database disk
image is malformed") after leaving a failed audit event. The pages say why instead,
with the one salvage advice of the matching check (docs/store.md §11.4, damage met at
runtime; docs/architecture.md §7).
"""

from __future__ import annotations

from .registry import BY_CODE as CHECKS
from ..health import latest, staleness

# Checks whose finding means the file itself is damaged (not busy, not a missing index).
DAMAGE_CHECKS = ("store_corrupt", "schema_malformed")


def known_damage(findings=(), status: str | None = None, reason: str = "") -> dict | None:
    """The store's damage as the page knows it, or None.

    ``findings``: Finding objects or finding dicts (of a live check or the latest pass);
    ``status``/``reason``: a readiness or a pass's store status (``"corrupt"`` counts).
    Returns ``{"check": code, "title", "detail", "next_step"}``; no store is opened."""
    for finding in findings:
        code = finding["check"] if isinstance(finding, dict) else finding.check
        if code in DAMAGE_CHECKS:
            detail = finding["detail"] if isinstance(finding, dict) else finding.detail
            return _damage(code, detail)
    if status == "corrupt":
        return _damage("schema_malformed" if reason.startswith("SQLite refuses the schema") else "store_corrupt",
                       reason)
    return None


def _damage(code: str, detail: str) -> dict:
    check = CHECKS[code]
    return {"check": code, "title": check.title, "detail": detail, "next_step": check.next_step}


def store_damage(store) -> dict | None:
    """:func:`known_damage` of ``store`` from its latest check pass, while its files
    are as that pass found them (``health.staleness``: ``os.stat`` only, no store
    is opened); None when no pass covered it."""
    return _damage_of(store, latest([store.key])[store.key])


def damaged_keys(stores) -> list[str]:
    """Keys of the ``stores`` :func:`store_damage` would name, with one read of the
    latest passes for all of them."""
    health = latest([s.key for s in stores])
    return [s.key for s in stores if _damage_of(s, health[s.key])]


def _damage_of(store, health) -> dict | None:
    if health.run is None or staleness(store, health):
        return None
    return pass_damage(health)


def pass_damage(health, findings=()) -> dict | None:
    """:func:`known_damage` of ``findings`` (a page's own, Finding objects or finding
    dicts, looked at first) and of the pass ``health`` comes from (a
    ``health.ProfileHealth``: its damage findings, then its store status and error).
    A never-checked ``ProfileHealth()`` gives the page's findings alone. The caller
    decides whether that pass still describes the store (``health.staleness``);
    no store is opened. Returns what :func:`known_damage` returns."""
    return known_damage([*findings, *health.of_checks(DAMAGE_CHECKS)], health.entry.get("status"),
                        health.entry.get("error") or "")
