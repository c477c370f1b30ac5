"""The one guarded write into a Hermes store (docs/architecture.md §5.1, "The guarded write").

Every write into a store — repairs, recovery, deletion, restore, moves, pruning,
flags — is a :class:`Write` performed by :meth:`GuardedWriter.perform`. Nothing
else in the project opens a writer connection or runs ``BEGIN IMMEDIATE``. The
steps, for one unit of work on one store:

1. one :class:`~sessions_app.models.AuditEvent` is created saying the write
   started (a process killed midway leaves "did not finish", never an
   unrecorded change);
2. :meth:`Write.authorize`: permission, confirmation tokens, blocked plans;
3. the store hazards (unreadable store, a store the latest check pass found
   damaged, split WAL generation, Hermes' own recovery files beside it:
   docs/store.md §11.4) are gathered *before* any lock is taken — scanning
   ``/proc`` holds no write lock;
4. :meth:`Write.check` on a read-only connection: liveness (ground rule 6) and
   the state the plan was made against (ground rule 2); it raises
   :class:`Refused` or :class:`Changed`;
5. the store is backed up before the first write of the run (ground rule 4;
   once per store per writer; a full disk stops further tries on that store);
   then the registry is read again for the sessions step 4 judged
   (:func:`refuse_registered`): a backup can take minutes, and an agent that
   opened one of them meanwhile refuses the write;
6. a writer connection with a busy timeout, ``BEGIN IMMEDIATE``, the file
   identity compared with the one backed up, :meth:`Write.check` again inside
   the transaction (nothing can change under the write lock), then
   :meth:`Write.execute`, ``COMMIT``. The re-check reads the store only (leases,
   locks, gateway tables, activity, the planned rows): the write lock serializes
   writes to the store and nothing else, so the registry file
   (``runtime/active_sessions.json``) and the ``sessions/`` folder are read in
   steps 4 and 5, where taking time holds up no agent; read again under the lock they
   would be no more current, only slower for every agent waiting on the store;
7. :meth:`Write.after_commit` (files, trash state); once the store committed,
   the outcome is ``applied`` whatever fails next ("deleted, but …");
8. :meth:`Write.verify` on a fresh read-only connection;
9. the audit event is completed with the one :class:`Outcome`.

Exceptions become outcomes in one place (:func:`_mapped`), so every kind of
write reports a locked store, a changed session or a failed backup in the same
words, and a bug in one action fails that unit only.

The module is longer than most on purpose: every step of a write into a store
lives here and nowhere else, so reading this one file is reading all of them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from django.conf import settings

from .. import audit
from ..checks.damage import store_damage
from ..checks.files import deleted_sidecar_holders
from ..models import AuditEvent
from ..stores import liveness
from ..stores import backup as store_backup
from ..stores.backup import BackupError, BackupRecord
from ..stores.connection import classify_error
from ..stores.schema import Capabilities
from ..stores.store import Store

log = logging.getLogger("sessions_app.actions")

# Seconds a write waits for Hermes' own writers before giving up (Hermes gives its
# routine writes 20 s of retries; the dashboard yields sooner and reports busy).
WRITE_TIMEOUT = 5.0
STARTED = "started; the process ended before the outcome was recorded"


class StoreBusy(Exception):
    """The store stayed locked past the write budget; retry later."""


class Changed(Exception):
    """The state a plan was made against changed before it could be applied."""


class Refused(Exception):
    """The write may not happen now (live session, hazard, permission, token).

    ``evidence``: the liveness evidence (``Evidence.to_dict()`` dicts) behind it.
    """

    def __init__(self, reason: str, evidence: list | None = None):
        super().__init__(reason)
        self.evidence = evidence or []


class Mismatch(Exception):
    """Rows written differ from rows planned; the transaction is rolled back."""


class CommitUnknown(Exception):
    """COMMIT failed in a way that leaves open whether the change landed; nothing
    prepared for it is discarded (the next heal run settles it from the store)."""


class Skip(Exception):
    """Nothing to do for this write (a plan blocked on this store); skipped with the reason."""


@dataclass
class Outcome:
    """What one write did — the one outcome type of every action.

    ``status``: ``planned`` (a dry run) | ``applied`` | ``skipped`` (changed
    meanwhile, store busy, nothing to do) | ``refused`` (live session, hazard,
    permission, token) | ``failed``. ``committed``: the store transaction
    committed, so rows did change; ``problems`` are the steps that failed after
    it (the reason then reads "<done verb>, but …"). ``done`` describes what the
    committed transaction did. ``counts`` are rows per table (deletions,
    restores), ``rows_changed`` their sum or the rows a repair changed.
    ``refused``: a refusal (status and audit outcome ``refused``, the same word
    in run reports and on every page: ``vocabulary.OUTCOMES``).
    ``retry``: not done for a passing reason (the store stayed locked, the state
    changed meanwhile, liveness evidence): a later run may do it.
    ``plan`` is the action's plan (``Plan``, ``DeletePlan``…); ``entry`` the
    trash entry of a deletion or restore; ``changed``/``override``/``nonce``
    belong to confirmed deletions.
    """

    plan: object = None
    status: str = "skipped"
    reason: str = ""
    rows_changed: int = 0
    backup: BackupRecord | None = None
    evidence: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    changes: list = field(default_factory=list)
    report: dict = field(default_factory=dict)
    committed: bool = False
    done: str = ""
    problems: list = field(default_factory=list)
    entry: object = None
    refused: bool = False
    retry: bool = False
    changed: bool = False
    override: bool = False
    nonce: str = ""

    @property
    def audit_outcome(self) -> str:
        """The ``AuditEvent.outcome`` value (a dry run's ``planned`` is ``skipped``)."""
        return "refused" if self.refused else {"planned": "skipped"}.get(self.status, self.status)

    @property
    def report_status(self) -> str:
        """The status in a run report: one of ``vocabulary.OUTCOMES`` (``planned`` |
        ``applied`` | ``skipped`` | ``refused`` | ``failed``), the audit trail's word
        for the same write."""
        return "refused" if self.refused else self.status

    def as_json(self) -> dict:
        """The ``actions[]`` entry of the ``heal_sessions --json`` report."""
        plan = self.plan
        return {
            "action": getattr(plan, "action", ""),
            "session_id": getattr(plan, "session_id", None),
            "status": self.report_status,
            "reason": self.reason,
            "changes": [c.__dict__ for c in getattr(plan, "changes", [])]
            if self.status in ("planned", "applied") else [],
        }

    def settle(self, verb: str) -> None:
        """After a commit the outcome is ``applied`` whatever failed next: a failure
        the mapping recorded becomes one more problem, and the reason says both."""
        if not self.committed:
            return
        if self.status != "applied" and self.reason:
            self.problems.append(self.reason)
        self.status = "applied"
        if self.problems:
            self.reason = f"{verb}, but {'; '.join(self.problems)}; {self.done}"
        elif self.done:
            self.reason = self.done


@dataclass
class WriteContext:
    """What :meth:`Write.check` and :meth:`Write.execute` see.

    ``conn`` is read-only before the transaction (``inside`` False) and the
    writer connection inside ``BEGIN IMMEDIATE`` (``inside`` True); ``now`` is
    epoch seconds.
    """

    store: Store
    conn: sqlite3.Connection | None
    caps: Capabilities
    now: float
    inside: bool
    outcome: Outcome


class Write:
    """One unit of work on one store, supplied by an action (check, then execute).

    Subclasses set ``action`` (the audit event's action name) and implement
    :meth:`check` and :meth:`execute`; the rest is optional. ``writes_store``
    False: a file-only write (no backup, no transaction; ``execute`` gets no
    connection). ``attach``: ``(path, schema)`` of a database attached to the
    writer connection (a trash entry's rows, for restores). ``verb``: how a
    committed write is described ("deleted", "restored", "applied").
    """

    action = ""
    writes_store = True
    attach: tuple[str, str] | None = None
    verb = "applied"
    plan: object = None

    def authorize(self, writer: "GuardedWriter", store: Store | None, outcome: Outcome) -> None:
        """Before anything is read: raise :class:`Refused` when the actor may not."""

    def check(self, ctx: WriteContext) -> None:
        """Liveness and planned state; raise :class:`Refused` or :class:`Changed`."""
        raise NotImplementedError

    def execute(self, ctx: WriteContext) -> None:
        """The statements, inside the transaction; record rows on ``ctx.outcome``."""
        raise NotImplementedError

    def discard(self, outcome: Outcome) -> None:
        """The transaction did not commit: drop what was prepared for it."""

    def after_commit(self, writer: "GuardedWriter", store: Store, outcome: Outcome) -> None:
        """Work that follows a committed write (files, trash state); append what
        fails to ``outcome.problems``."""

    def verify(self, store: Store, outcome: Outcome) -> str | None:
        """After commit, on a fresh read-only connection: None when the write holds."""
        return None

    def verified(self, outcome: Outcome, problem: str | None) -> None:
        """Settle the outcome after :meth:`verify` (default: a problem is one more
        post-commit problem; repairs make it a failure)."""
        if problem:
            outcome.problems.append(problem)
        outcome.status = "applied"

    def settle(self, outcome: Outcome) -> None:
        """After the steps: a committed write is ``applied`` whatever failed next
        (:meth:`Outcome.settle`); a repair keeps a failed verify as a failure."""
        outcome.settle(self.verb)

    def describe(self, outcome: Outcome) -> None:
        """Last word on the outcome before it is recorded (e.g. what stays where)."""

    def audit_fields(self, store: Store | None, outcome: Outcome) -> dict:
        """``AuditEvent`` fields of this write: ``session_ids``, ``plan`` (JSON),
        ``check_code``, ``changes``, ``profile``, ``store_path``."""
        return {}


class Unstarted(Write):
    """A write that never reached its store (refused before it ran, its profile
    gone): only its audit event is recorded (:meth:`GuardedWriter.note`)."""

    def __init__(self, action: str, session_ids: list[str], profile: str = ""):
        self.action, self.session_ids, self.profile = action, list(session_ids), profile

    def audit_fields(self, store, outcome):
        fields = {"session_ids": self.session_ids}
        if store is None and self.profile:
            fields["profile"] = self.profile
        return fields


def jsonable(value):
    """JSON round trip, so a guard or a plan compares equal before and after serialization."""
    return json.loads(json.dumps(value, default=str))


def file_identity(path) -> tuple:
    """``(st_dev, st_ino)`` of a file: ``stat`` opens no descriptor (ground rule 5)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def store_hazard(store: Store) -> str | None:
    """Why no write may touch ``store`` now, or None.

    Hermes itself refuses to connect while a process holds a deleted ``-wal``/``-shm``
    (a split WAL generation), and its own schema repair may be midway when scratch
    or staging copies lie beside the store (docs/store.md §11.3, §11.4): the dashboard
    refuses in both cases, as it does for a store it cannot read. A store the latest
    check pass found damaged (``checks.damage.store_damage``: its stored finding,
    while the files are as that pass found them) is refused with the salvage advice:
    writing can make SQLite's damage worse (docs/store.md §11.4). A store salvaged or
    replaced since that pass has changed files, so it is judged again by the next one.
    """
    status = store.readiness()
    if status is not None:
        return f"the store is {status.status}: {status.reason}"
    damage = store_damage(store)
    if damage:
        return (f"this store is damaged ({damage['title']}: {damage['detail']}); nothing written. "
                f"{damage['next_step']}")
    holders = deleted_sidecar_holders(store.path)
    if holders:
        who = ", ".join(f"pid {h['pid']} ({h['name']}) holds a deleted {h['file']}" for h in holders[:3])
        return f"split WAL generation, nothing written: {who}; quit those processes and run 'hermes doctor'"
    try:
        names = os.listdir(store.path.parent)
    except OSError as exc:
        return f"cannot list the profile folder: {exc.strerror}"
    base = store.path.name
    risky = [n for n in names if n.startswith((f"{base}.retired-wal-", f"{base}.repair-scratch",
                                               f"{base}.backup-staging-"))]
    if risky:
        return f"Hermes recovery files lie beside the store ({', '.join(sorted(risky)[:3])}); nothing written"
    return None


def refuse_live(store: Store, conn, caps: Capabilities, session_ids, now: float, *,
                closed_counts: bool = False, where: str = "", inside: bool = False) -> None:
    """Ground rule 6: raise :class:`Refused` when any of ``session_ids`` is not
    ``not_live`` (docs/store.md §7, liveness evidence). ``closed_counts``: recent
    activity of a session its writer ended still counts as live. ``inside``: the
    re-check inside the write transaction, which reads the store only (module
    docstring, step 6)."""
    for session_id in dict.fromkeys(session_ids):
        verdict = liveness.evidence_for(store, conn, caps, session_id, now, closed_counts=closed_counts,
                                        registry=not inside)
        if verdict.verdict != "not_live":
            items = "; ".join(f"{e.source}: {e.detail}" for e in verdict.evidence[:3])
            label = "live" if verdict.verdict == "live" else "maybe live"
            place = f" in {where}" if where else ""
            raise Refused(f"session {session_id} looks {label}{place}, nothing written ({items})"
                          if where else f"session looks {label}, nothing written ({items})",
                          [e.to_dict() for e in verdict.evidence])


def refuse_registered(watch: liveness.RegistryWatch) -> None:
    """Ground rule 6 across the backup: raise :class:`Refused` when the registry
    (``runtime/active_sessions.json``, docs/store.md §7.5) now holds evidence for a
    session the write checked that it did not hold when it was checked. Read right
    before the writer opens, outside the write lock (module docstring, step 5)."""
    appeared = watch.appeared(time.time())
    if appeared:
        items = "; ".join(f"{e.source}: {e.detail}" + (f" ({sid})" if sid else "") for sid, e in appeared[:3])
        raise Refused(f"a session was opened during the backup, nothing written ({items})",
                      [e.to_dict() for _, e in appeared])


@contextmanager
def _writer(store: Store) -> Iterator[sqlite3.Connection]:
    """A read-write connection, closed on exit. Like Hermes' own writers
    (docs/store.md §5.1), ``foreign_keys=ON`` and autocommit outside the explicit
    transaction; the journal mode is never touched, nothing checkpoints or vacuums."""
    timeout = getattr(settings, "HERMES_WRITE_TIMEOUT", WRITE_TIMEOUT)
    # mode=rw: a store that vanished is an error, never a new empty database.
    uri = Path(store.path).absolute().as_uri() + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, detect_types=0)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        yield conn
    finally:
        conn.close()


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (ground rule 2); rolls back on any exception.
    Raises :class:`StoreBusy` when the write lock cannot be had within the timeout."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if classify_error(exc)[0] == "busy":
            raise StoreBusy(str(exc)) from exc
        raise
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled back on its own already
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
            raise
        # Not in a transaction any more and COMMIT said it failed: whether the change
        # landed cannot be told from here; the store will say (reconcile, resume).
        raise CommitUnknown(str(exc)) from exc


@contextmanager
def _mapped(outcome: Outcome, store: Store | None, write: Write):
    """Turn whatever stops a write into ``outcome``'s status and reason — the one
    exception-to-outcome mapping; an unexpected error also logs its traceback."""
    verb = write.verb
    nothing = "nothing written" if verb == "applied" else f"nothing {verb}"
    try:
        yield
    except Skip as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
    except Refused as exc:
        outcome.status, outcome.reason, outcome.refused = "refused", str(exc), True
        outcome.evidence = outcome.evidence or exc.evidence
        outcome.retry = bool(exc.evidence)  # an agent holds it: a passing state
    except StoreBusy:
        outcome.status, outcome.reason = "skipped", f"the store stayed locked; {nothing}, retry later"
        outcome.retry = True
    except Changed as exc:
        outcome.status, outcome.reason = "skipped", f"changed since it was planned ({exc}); {nothing}"
        outcome.retry = True
    except BackupError as exc:
        outcome.status, outcome.reason = "failed", f"no write: {exc}"
    except Mismatch as exc:
        outcome.status, outcome.reason = "failed", f"rolled back, {nothing}: {exc}"
    except CommitUnknown as exc:
        outcome.status, outcome.reason = "failed", (f"COMMIT failed ({exc}); whether it landed is settled from the "
                                                    "store by the next heal run")
    except (sqlite3.Error, OSError) as exc:
        outcome.status, outcome.reason = "failed", f"{exc.__class__.__name__}: {exc}"
    except ValueError as exc:
        outcome.status, outcome.reason = "failed", f"invalid plan: {exc}"
    except Exception as exc:  # a bug or a value no one foresaw: fail this unit, go on
        log.exception("write %s failed on %s", outcome.plan.__class__.__name__, store)
        outcome.status, outcome.reason = "failed", f"unexpected {exc.__class__.__name__}: {exc}"


class GuardedWriter:
    """Who writes, in which run: performs :class:`Write` units under the ground rules.

    ``actor`` (a user or None) and ``actor_label`` (user name, or command and
    host for cron) go into every audit event, with ``run`` and
    ``request_address``. Remembers the backup of each store, so a store is copied
    once, before the first write of the run (ground rule 4).
    """

    backup_label = "run"

    def __init__(self, actor=None, actor_label: str = "", run=None, request_address: str | None = None):
        self.actor = actor
        self.actor_label = actor_label or (actor.get_username() if actor else "system")
        self.run = run
        self.request_address = request_address
        self.backups: dict[str, BackupRecord] = {}
        self._backup_failed: dict[str, BackupError] = {}

    def backup_for(self, store: Store) -> BackupRecord:
        """The run's verified backup of ``store``, taken on first use.

        Raises ``BackupError``. A backup that failed for lack of space is not
        tried again for that store in this run (each try would fill the disk again).
        """
        key = str(store.path)
        if key in self._backup_failed:
            raise self._backup_failed[key]
        if key not in self.backups:
            try:
                self.backups[key] = store_backup.backup_store(store, label=self.backup_label)
            except BackupError as exc:
                if _no_space(exc):
                    self._backup_failed[key] = exc
                raise
        return self.backups[key]

    def perform(self, store: Store | None, write: Write, outcome: Outcome | None = None) -> Outcome:
        """Perform ``write`` on ``store`` (steps in the module docstring); never
        raises for store problems. Returns the completed ``outcome``."""
        started = time.monotonic()
        outcome = outcome or Outcome(write.plan)
        event = self.record(store, write, Outcome(write.plan, "failed", STARTED, nonce=outcome.nonce,
                                                  entry=outcome.entry), 0)
        with _mapped(outcome, store, write):
            write.authorize(self, store, outcome)
            self.steps(store, write, outcome)
        write.settle(outcome)
        write.describe(outcome)
        self.record(store, write, outcome, int((time.monotonic() - started) * 1000), event=event)
        return outcome

    def precheck(self, store: Store, write: Write, outcome: Outcome) -> Capabilities:
        """Steps 3 and 4 alone (hazards, then :meth:`Write.check` read-only); returns
        the store's capabilities. Raises what :func:`_mapped` maps. A caller may run
        them ahead, before work elsewhere that only makes sense if this write can
        follow (a move's copy into the target, before its removal from the source)."""
        return self._precheck(store, write, outcome)[0]

    def _precheck(self, store: Store, write: Write, outcome: Outcome) -> tuple[Capabilities, liveness.RegistryWatch]:
        """:meth:`precheck`, plus what its liveness checks read from the registry."""
        hazard = store_hazard(store)
        if hazard:
            raise Refused(hazard)
        with store.read() as conn, liveness.watching_registry() as watch:
            caps = store.capabilities(conn)
            write.check(WriteContext(store, conn, caps, time.time(), False, outcome))
        return caps, watch

    def steps(self, store: Store, write: Write, outcome: Outcome) -> None:
        """Steps 3 to 8 without the audit event (for a caller that holds its own,
        e.g. the source side of a move). Raises what :func:`_mapped` maps."""
        caps, watch = self._precheck(store, write, outcome)
        if not write.writes_store:
            write.execute(WriteContext(store, None, caps, time.time(), False, outcome))
        else:
            identity = file_identity(store.path)
            try:
                outcome.backup = self.backup_for(store)
                refuse_registered(watch)
                with _writer(store) as conn:
                    if write.attach:  # read-only: a missing file is an error, never a new database
                        conn.execute(f"ATTACH DATABASE ? AS {write.attach[1]}",
                                     (Path(write.attach[0]).absolute().as_uri() + "?mode=ro",))
                    try:
                        with _transaction(conn):
                            # The file written must be the one just backed up.
                            if file_identity(store.path) != identity:
                                raise Refused("the store file was replaced since it was backed up; nothing written")
                            ctx = WriteContext(store, conn, store.capabilities(conn), time.time(), True, outcome)
                            write.check(ctx)
                            write.execute(ctx)
                        outcome.committed = True  # from here on: "<verb>, but …" (Outcome.settle)
                    finally:
                        if write.attach:
                            conn.execute(f"DETACH DATABASE {write.attach[1]}")
            except CommitUnknown:
                raise  # may have landed: keep what was prepared (a trash entry) for the store to settle
            except BaseException:
                if not outcome.committed:
                    write.discard(outcome)
                raise
        write.after_commit(self, store, outcome)
        write.verified(outcome, write.verify(store, outcome))

    def note(self, store: Store | None, action: str, session_ids: list[str], status: str, reason: str,
             profile: str = "") -> AuditEvent:
        """Record a write that never reached its store (``status`` ``refused`` or
        ``failed``, with ``reason``): a forged token, a missing permission, a
        profile that is gone. Nothing was written."""
        return self.record(store, Unstarted(action, session_ids, profile),
                           Outcome(None, status, reason, refused=status == "refused"), 0)

    def record(self, store: Store | None, write: Write, outcome: Outcome, duration_ms: int,
               event: AuditEvent | None = None) -> AuditEvent:
        """Create (or, given ``event``, complete) the write's one audit event."""
        applied = outcome.status == "applied"
        fields = dict(
            actor=self.actor,
            actor_label=self.actor_label,
            action=write.action,
            check_code="",
            profile=store.key if store else "",
            store_path=str(store.path) if store else "",
            session_ids=[],
            plan={},
            outcome=outcome.audit_outcome,
            reason=outcome.reason,
            changes=[],
            rows_changed=outcome.rows_changed if applied or outcome.committed else 0,
            duration_ms=duration_ms,
            request_address=self.request_address,
            run=self.run,
        )
        fields.update(write.audit_fields(store, outcome))
        if not applied:
            fields["changes"] = []
        backup = outcome.backup if applied or outcome.rows_changed else None
        return audit.record(event, backup=backup, **fields)


def _no_space(exc: BaseException) -> bool:
    if getattr(exc, "no_space", False):
        return True
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "database or disk is full" in str(exc) or "No space left" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
