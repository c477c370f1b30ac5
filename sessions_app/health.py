"""Health as of the latest check pass, read from the dashboard's own database.

Whole-store check passes can take seconds on big stores, so list pages show the
findings of the latest finished pass (``HealRun.report``) with its time, and the
session page runs the session's own checks live.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import HealRun

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class ProfileHealth:
    """Findings of one profile from the latest pass that covered it (``run`` None: never checked)."""

    run: HealRun | None = None
    entry: dict = field(default_factory=dict)

    @property
    def findings(self) -> list[dict]:
        return self.entry.get("findings", [])

    def counts(self) -> dict[str, int]:
        out = {"critical": 0, "warning": 0, "info": 0}
        for f in self.findings:
            out[f["severity"]] = out.get(f["severity"], 0) + 1
        return out

    def by_session(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for f in self.findings:
            if f.get("session_id"):
                out.setdefault(f["session_id"], []).append(f)
        for items in out.values():
            items.sort(key=lambda f: SEVERITY_ORDER.get(f["severity"], 9))
        return out


def latest(profile_keys) -> dict[str, ProfileHealth]:
    """Latest finished whole-pass result per profile key (plan-only runs excluded)."""
    wanted = set(profile_keys)
    found: dict[str, ProfileHealth] = {key: ProfileHealth() for key in wanted}
    # Partial passes (--only, single repairs) do not describe a profile's health.
    runs = (HealRun.objects.filter(status=HealRun.Status.DONE, plans=[], only=[], mode__in=("check", "apply"))
            .exclude(report=None).order_by("-finished_at"))
    for run in runs.iterator(chunk_size=20):
        for entry in run.report.get("profiles", []):
            key = entry.get("profile")
            if key in wanted and found[key].run is None:
                found[key] = ProfileHealth(run, entry)
        if all(h.run is not None for h in found.values()):
            break
    return found
