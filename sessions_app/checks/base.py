"""Building blocks of the check catalog (docs/architecture.md §4.

A :class:`Check` has a stable ``code``, a default ``severity``, a plain-language
``title``/``explanation`` for admins, a ``next_step`` (what an admin does when no
automatic repair is offered), the ``heal`` action that repairs it (or None)
and a ``scope`` (``store`` or ``session``). ``run(ctx)`` yields :class:`Finding`
objects. Checks read through ``ctx.conn``, a read-only connection (ground rule 1),
with set-based SQL; a capability the store lacks (ground rule 8) makes a check
skip itself (``requires``) or adapt its SQL.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator

from django.conf import settings

from ..stores.liveness import LiveIndex
from ..stores.schema import Capabilities

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
# Evidence lists (message ids, files...) are capped so one huge session cannot
# blow up a JSON report; ``count`` always carries the full number.
EVIDENCE_CAP = 200
# SQLite's default limit of host parameters is 999 (older builds): stay below it.
SQL_IN_CHUNK = 900


@dataclass(frozen=True)
class Finding:
    """One problem found.

    ``check``: stable code from the catalog; ``severity``: critical | warning |
    info; ``session_id``: None for store-level findings; ``count``: rows/items
    involved; ``detail``: plain-language and specific; ``heal``: action name or
    None; ``evidence``: JSON-serializable facts an action or the UI needs;
    ``next_step_case``: for a finding without a repair, the case of its check whose
    next step it takes (``Check.case_next_steps``), "" for the check's own. Stored
    with the finding (``runs.finding_json``), unlike the evidence.
    """

    check: str
    severity: str
    session_id: str | None
    count: int
    detail: str
    heal: str | None
    evidence: dict = field(default_factory=dict)
    next_step_case: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Finding":
        """A finding from a stored report's entry (``runs.finding_json``: no evidence,
        perhaps keys of its own such as ``sqlite_report``, which are left out)."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Thresholds:
    """Time thresholds in seconds, the WAL threshold in bytes."""

    idle_seconds: float = 3600
    stale_seconds: float = 30 * 86400
    wal_oversized_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_settings(cls) -> "Thresholds":
        """``HERMES_IDLE_SECONDS``, ``HERMES_STALE_SECONDS``,
        ``HERMES_WAL_OVERSIZED_BYTES`` from Django settings, defaults above."""
        return cls(
            idle_seconds=float(getattr(settings, "HERMES_IDLE_SECONDS", cls.idle_seconds)),
            stale_seconds=float(getattr(settings, "HERMES_STALE_SECONDS", cls.stale_seconds)),
            wal_oversized_bytes=int(getattr(settings, "HERMES_WAL_OVERSIZED_BYTES", cls.wal_oversized_bytes)),
        )


def active_predicate(caps, alias: str = "") -> str:
    """SQL predicate "message row is active", shared by the checks and the actions
    that heal them (so a heal and its check agree). Stores before 0.17 have no
    ``active`` column (every row is live); ``active IS NULL`` counts as active, as
    upstream heals it to 1 on its next writable open (docs/store.md §13 row 18); any other
    value (0, or a stray 2) is not active."""
    if not caps.has("messages", "active"):
        return "1"
    col = f"{alias}.active" if alias else "active"
    return f"({col} = 1 OR {col} IS NULL)"


@dataclass
class CheckContext:
    """Everything a check may read during one pass over one store.

    ``now`` is epoch seconds. ``liveness`` maps session ids to live evidence
    (:class:`~sessions_app.stores.liveness.LiveIndex`). ``other_stores`` are the
    other profiles' stores (for ``id_collision``). ``session_id``, when set,
    restricts session checks to that one session (the session page).
    ``cache`` shares expensive intermediate results between checks of one pass;
    ``notes`` collects plain-language remarks for the report (a check that could
    not look at something).
    """

    store: object
    conn: sqlite3.Connection
    caps: Capabilities
    now: float
    thresholds: Thresholds
    liveness: LiveIndex
    other_stores: list = field(default_factory=list)
    session_id: str | None = None
    cache: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def full_pass(self) -> bool:
        return self.session_id is None

    def memo(self, key: str, compute: Callable[[], object]):
        """``compute()`` once per pass (e.g. the transcript walk used by several checks)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def verdict(self, session_id: str) -> str:
        """``live`` | ``maybe_live`` | ``not_live`` (docs/store.md §7)."""
        return self.liveness.verdict(session_id)

    def has(self, table: str, column: str) -> bool:
        return self.caps.has(table, column)

    def active(self, alias: str = "") -> str:
        """SQL predicate "row is active" (:func:`active_predicate`)."""
        return active_predicate(self.caps, alias)

    def session_filter(self, column: str) -> tuple[str, tuple]:
        """``(" AND <column> = ?", (session_id,))`` in a restricted run, else ``("", ())``."""
        if self.session_id is None:
            return "", ()
        return f" AND {column} = ?", (self.session_id,)

    def col(self, table: str, column: str, alias: str = "", default: str = "NULL") -> str:
        """``alias.column`` if the store has it, else a literal default."""
        if not self.has(table, column):
            return default
        return f"{alias}.{column}" if alias else column


class Check:
    """One catalog entry. Subclasses set the class attributes and ``run``.

    ``requires`` lists capabilities: ``"table"`` or ``("table", "column")``; a
    store lacking one skips the check (capability off, ground rule 8).
    ``runner_emitted`` marks codes the runner itself reports (access problems).
    ``reads_other_stores`` marks checks that read ``ctx.other_stores``: the runner
    then leaves out the ones that are locked (see ``runner.reachable_others``).
    ``title`` is the short human name pages show beside the code; ``next_step`` says,
    in a sentence or two, what to do about a finding that carries no repair (its
    check has none, or this finding's case has none), or when the repair is blocked.
    ``light`` marks cheap store-level checks (file state, small tables, no
    ``quick_check``, no walk of the messages): ``watch_stores`` runs them every few
    minutes (``registry.light_codes``).
    """

    code: str = ""
    severity: str = "warning"
    title: str = ""
    explanation: str = ""
    next_step: str = ""
    heal: str | None = None
    scope: str = "session"
    requires: tuple = ()
    runner_emitted: bool = False
    reads_other_stores: bool = False
    light: bool = False

    def applies(self, ctx: CheckContext) -> bool:
        """Store-level checks run in full passes only; capabilities must be present."""
        if self.scope == "store" and not ctx.full_pass:
            return False
        for need in self.requires:
            if isinstance(need, str):
                if not ctx.caps.has_table(need):
                    return False
            elif not ctx.caps.has(*need):
                return False
        return True

    def run(self, ctx: CheckContext) -> Iterable[Finding]:
        return ()

    #: Next steps of cases of this check that need other words than ``next_step``
    #: (``history_lost`` of a session whose row is gone), by case name.
    case_next_steps: dict = {}

    def next_step_case(self, evidence: dict) -> str:
        """The case (a key of ``case_next_steps``) of a finding without a repair, from
        its ``evidence``; "" when the check's own ``next_step`` applies."""
        return ""

    def next_step_for(self, case: str = "") -> str:
        """What to do about a finding of this check that carries no repair, given its
        ``next_step_case``."""
        return self.case_next_steps.get(case) or self.next_step

    def finding(self, session_id: str | None, count: int, detail: str, evidence: dict | None = None,
                *, severity: str | None = None, heal: str | None | object = ...) -> Finding:
        """A finding of this check; ``severity``/``heal`` default to the check's."""
        heal = self.heal if heal is ... else heal
        return Finding(
            check=self.code,
            severity=severity or self.severity,
            session_id=session_id,
            count=int(count),
            detail=detail,
            heal=heal,
            evidence=evidence or {},
            next_step_case="" if heal else self.next_step_case(evidence or {}),
        )

    def describe(self) -> dict:
        """Catalog entry for the UI and ``--help`` texts."""
        return {
            "code": self.code, "severity": self.severity, "title": self.title,
            "explanation": self.explanation, "next_step": self.next_step, "heal": self.heal,
            "scope": self.scope,
        }


# --------------------------------------------------------------------------- helpers

def chunks(items: list, size: int = SQL_IN_CHUNK) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def capped(values: list, cap: int = EVIDENCE_CAP) -> list:
    return list(values[:cap])


def id_span(ids: list[int]) -> str:
    """``"ids 12-14"`` for a contiguous run, ``"ids 3, 9, 40"`` otherwise (capped)."""
    ids = sorted(ids)
    if not ids:
        return "no ids"
    if len(ids) == 1:
        return f"id {ids[0]}"
    if ids[-1] - ids[0] + 1 == len(ids):
        return f"ids {ids[0]}-{ids[-1]}"
    shown = ", ".join(str(i) for i in ids[:10])
    return f"ids {shown}" + (f" … ({len(ids)} in all)" if len(ids) > 10 else "")


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def ago(seconds: float) -> str:
    """Plain duration: ``"3 days"``, ``"5 hours"``, ``"40 minutes"``."""
    seconds = max(0.0, float(seconds))
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds"
