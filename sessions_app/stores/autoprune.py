"""Hermes' own auto-prune: what a profile's Hermes deletes by itself at its next start.

Hermes' CLI and gateway run ``SessionDB.maybe_auto_prune_and_vacuum`` when they
start, if the profile's ``config.yaml`` says ``sessions.auto_prune`` (docs/store.md,
Hermes' own auto-prune, which cites the upstream sources). That deletion is not
restorable; this module shows it beforehand, read-only, so an admin can pin or
export what would go:

- :func:`read_settings` reads ``sessions.auto_prune``, ``retention_days`` and
  ``min_interval_hours`` the way Hermes does (Python truthiness, ``int()``, the
  managed ``/etc/hermes/config.yaml`` winning at the leaf), and says where each
  value came from and when Hermes would skip its maintenance altogether;
- :func:`rules_for` picks the deletion rule of the Hermes that writes the store,
  told by the store's columns (ground rule 8): releases up to 0.19.0 delete every
  ended session *started* before the cutoff; the newest shape (``pinned`` column)
  ages sessions by last activity and spares pinned conversations, compression
  ancestors of a kept continuation and sessions under a live lease or lock;
- :func:`preview` lists the sessions a start now would delete;
- :func:`would_prune_entry` tells which sessions of a trash entry Hermes would
  delete again once restored.

``config.yaml`` is read with plain file I/O: it is not a SQLite file (ground rule
5 concerns ``state.db`` and its sidecars only).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path


from . import liveness as live_mod
from .retention import read_graph
from .schema import Capabilities

DAY = 86400
CONFIG_MAX_BYTES = 1024 * 1024
MANAGED_DIR = Path("/etc/hermes")
LIST_LIMIT = 500  # sessions listed by a preview (the count is exact)


@dataclass(frozen=True)
class Rules:
    """How the Hermes that writes a store prunes (docs/store.md, Hermes' own auto-prune).

    ``name``: ``release`` (0.13.0 to 0.19.0) | ``newest``. ``default_on``: the
    value of ``sessions.auto_prune`` when ``config.yaml`` does not set it.
    """

    name: str
    default_on: bool
    age_by: str  # "started_at" | "last_active"
    spares_pinned: bool
    whole_lineages: bool
    spares_live_guards: bool

    @property
    def label(self) -> str:
        return "hermes-agent 0.13.0 to 0.19.0" if self.name == "release" else "newest upstream Hermes"


RELEASE_RULES = Rules("release", False, "started_at", False, False, False)
NEWEST_RULES = Rules("newest", True, "last_active", True, True, True)


def rules_for(caps: Capabilities) -> Rules:
    """The rule of the store's Hermes: the newest one where the store has ``pinned``
    (the column came with the code that spares pins), the releases' otherwise."""
    return NEWEST_RULES if caps.has("sessions", "pinned") else RELEASE_RULES


@dataclass
class Settings:
    """Hermes' maintenance settings of one profile, as its next start reads them.

    ``enabled`` None: the dashboard cannot tell (an environment reference). Each
    ``*_source`` says where the value came from: ``config.yaml``, ``managed
    config`` or ``default``. ``skip``: why Hermes would skip its maintenance
    altogether (an error it swallows), or ''. ``notes``: what an admin should know.
    """

    config_path: Path
    exists: bool = False
    enabled: bool | None = False
    enabled_source: str = "default"
    retention_days: int | None = 90
    retention_source: str = "default"
    min_interval_hours: int | None = 24
    interval_source: str = "default"
    skip: str = ""
    notes: list[str] = field(default_factory=list)


def _load_yaml(path: Path, notes: list[str], label: str) -> dict | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.append(f"{label} cannot be read ({exc.strerror}); Hermes falls back to its defaults")
        return {}
    if size > CONFIG_MAX_BYTES:
        notes.append(f"{label} is larger than {CONFIG_MAX_BYTES} bytes; not read (the dashboard assumes defaults)")
        return {}
    import yaml  # late: PyYAML is a visible part of a server's start, config is read rarely

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        notes.append(f"{label} does not parse ({first}); a fresh Hermes process uses its defaults")
        return {}
    return data if isinstance(data, dict) else {}


def _managed_dir() -> Path | None:
    override = os.environ.get("HERMES_MANAGED_DIR", "").strip()
    if override:
        return Path(override) if Path(override).is_dir() else None
    return MANAGED_DIR if MANAGED_DIR.is_dir() else None


def _as_int(value, name: str, out: Settings) -> int | None:
    """Hermes' ``int(value)``; a value it cannot convert makes it skip maintenance."""
    if isinstance(value, str) and "${" in value:
        out.notes.append(f"sessions.{name} refers to an environment variable ({value!r}); "
                         "the dashboard cannot see the agent's environment")
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        out.skip = (f"sessions.{name} is {value!r}, which Hermes cannot read as a whole number: "
                    "it skips its maintenance (and logs it at debug level only)")
        return None


def read_settings(home: Path, rules: Rules) -> Settings:
    """The settings Hermes' next start in ``home`` reads (``<home>/config.yaml``,
    then the managed ``config.yaml``, which wins key by key)."""
    path = Path(home) / "config.yaml"
    out = Settings(path, exists=path.is_file())
    user = _load_yaml(path, out.notes, "config.yaml")
    managed_dir = _managed_dir()
    managed = _load_yaml(managed_dir / "config.yaml", out.notes, f"{managed_dir}/config.yaml") if managed_dir else None
    values: dict[str, tuple[object, str]] = {}
    for layer, label in ((user, "config.yaml"), (managed, "managed config")):
        if layer is None or "sessions" not in layer:
            continue
        section = layer["sessions"]
        if section is None:
            continue  # an empty ``sessions:`` keeps the defaults (Hermes' _deep_merge)
        if not isinstance(section, dict):
            out.skip = (f"sessions in the {label} is not a mapping ({type(section).__name__}): "
                        "Hermes' maintenance fails on it and is skipped")
            return out
        for key in ("auto_prune", "retention_days", "min_interval_hours"):
            if key in section:
                values[key] = (section[key], label)
    raw, out.enabled_source = values.get("auto_prune", (rules.default_on, "default"))
    if isinstance(raw, str) and "${" in raw:
        out.enabled = None
        out.notes.append(f"sessions.auto_prune refers to an environment variable ({raw!r}); "
                         "the dashboard cannot tell whether it is on")
    else:
        out.enabled = bool(raw)  # Hermes: ``if not cfg.get("auto_prune", False)``
        if isinstance(raw, str):
            out.notes.append(f"sessions.auto_prune is the text {raw!r}, which Hermes reads as "
                             f"{'on' if raw else 'off'} (any non-empty text is on)")
    if out.enabled_source == "default":
        out.notes.append(f"config.yaml does not set sessions.auto_prune: the default of {rules.label} applies "
                         f"({'on' if rules.default_on else 'off'}); set it explicitly to be sure")
    days, out.retention_source = values.get("retention_days", (90, "default"))
    out.retention_days = _as_int(days, "retention_days", out)
    hours, out.interval_source = values.get("min_interval_hours", (24, "default"))
    out.min_interval_hours = _as_int(hours, "min_interval_hours", out)
    if out.retention_days is not None and out.retention_days < 0:
        if rules.name == "newest":
            out.skip = "sessions.retention_days is negative: newest Hermes refuses it and skips its maintenance"
        else:
            out.notes.append("sessions.retention_days is negative: the cutoff lies in the future, so a release "
                             "Hermes deletes every ended session")
    return out


@dataclass
class Preview:
    """What Hermes' next start would delete in one store.

    ``sessions``: up to :data:`LIST_LIMIT` rows (id, source, title, started_at,
    ended_at, last_active, message_count, archived), oldest first; ``count`` is
    exact. ``last_run``/``due_at``: epoch seconds of ``state_meta.last_auto_prune``
    and of the first start that runs maintenance again (None: the next one).
    ``will_run``: auto-prune is on and nothing makes Hermes skip it.
    """

    rules: Rules
    settings: Settings
    sessions: list[dict] = field(default_factory=list)
    count: int = 0
    cutoff: float | None = None
    last_run: float | None = None
    due_at: float | None = None
    error: str = ""

    @property
    def will_run(self) -> bool:
        return bool(self.settings.enabled) and not self.settings.skip and self.settings.retention_days is not None

    @property
    def ids(self) -> list[str]:
        return [row["id"] for row in self.sessions]


LAST_ACTIVE = ("COALESCE((SELECT MAX(_v.v) FROM (SELECT {a}.last_activity_at AS v UNION ALL "
               "SELECT (SELECT MAX(_m.timestamp) FROM messages _m WHERE _m.session_id = {a}.id)) _v), {a}.started_at)")


def _last_active_sql(caps: Capabilities, alias: str = "s") -> str:
    """Upstream's ``_sql_session_last_active``: the freshest of ``last_activity_at``
    and the newest message, else ``started_at``."""
    if caps.has("sessions", "last_activity_at"):
        return LAST_ACTIVE.format(a=alias)
    return (f"COALESCE((SELECT MAX(_m.timestamp) FROM messages _m WHERE _m.session_id = {alias}.id), "
            f"{alias}.started_at)")


def rule_sql(caps: Capabilities, rules: Rules, cutoff: float, alias: str = "s") -> tuple[str, list]:
    """The row-level part of the rule (ended, old enough, not pinned) on ``sessions {alias}``;
    lineages, pinned tails and live guards are applied after (:func:`select`)."""
    a = alias
    if rules.age_by == "started_at":
        return f"{a}.ended_at IS NOT NULL AND {a}.started_at < ?", [cutoff]
    where = [f"{a}.ended_at IS NOT NULL", f"{_last_active_sql(caps, a)} < ?"]
    params: list = [cutoff]
    if caps.has("sessions", "end_reason"):
        # Orphan-swept rows age from the sweep, not from their old activity.
        where.append(f"(COALESCE({a}.end_reason, '') != 'startup_orphan_reap' OR {a}.ended_at < ?)")
        params.append(cutoff)
    if rules.spares_pinned and caps.has("sessions", "pinned"):
        where.append(f"COALESCE({a}.pinned, 0) = 0")
    return " AND ".join(where), params


ROW_COLUMNS = ("id", "source", "title", "started_at", "ended_at", "message_count", "archived")


def select(store, conn, caps: Capabilities, rules: Rules, cutoff: float, now: float) -> list[dict]:
    """Every session the rule deletes, oldest activity first (module docstring)."""
    where, params = rule_sql(caps, rules, cutoff)
    cols = ", ".join(f"s.{c}" if caps.has("sessions", c) else f"NULL AS {c}" for c in ROW_COLUMNS)
    active = _last_active_sql(caps) if rules.age_by == "last_active" else "s.started_at"
    rows = [dict(zip(ROW_COLUMNS + ("last_active",), r)) for r in conn.execute(
        f"SELECT {cols}, {active} FROM sessions s WHERE {where} ORDER BY 8, s.started_at, s.id", params)]
    if not rows or rules.name == "release":
        return rows
    chosen = {r["id"] for r in rows}
    graph = read_graph(conn, caps)
    if rules.spares_pinned and caps.has("sessions", "pinned"):
        # A pin covers the whole conversation: continuations after a pinned segment stay.
        pinned = {r[0] for r in conn.execute("SELECT id FROM sessions WHERE COALESCE(pinned, 0) != 0")}
        below: dict[str, list[str]] = {}
        for child, parent in graph.compression_parent.items():
            below.setdefault(parent, []).append(child)
        queue = list(pinned)
        while queue:
            for child in below.get(queue.pop(), ()):
                if child in chosen:
                    chosen.discard(child)
                if child not in pinned:
                    pinned.add(child)
                    queue.append(child)
    if rules.whole_lineages:
        # A compression ancestor goes only with every continuation after it.
        kept: set[str] = set()
        for child, parent in graph.compression_parent.items():
            if child in chosen:
                continue
            node, hops = parent, 0
            while node and node not in kept and hops < 1000:
                kept.add(node)
                node, hops = graph.compression_parent.get(node), hops + 1
        chosen -= kept
    if rules.spares_live_guards and chosen:
        index = live_mod.live_sessions(store, conn, caps, now)
        chosen = {sid for sid in chosen
                  if not any(e.source in ("turn_lease", "compression_lock") and e.blocks for e in index.get(sid, ()))}
    return [r for r in rows if r["id"] in chosen]


def _meta(conn, caps: Capabilities, key: str):
    if not caps.has("state_meta", "key"):
        return None
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def preview(store, now: float | None = None) -> Preview:
    """What Hermes' next start would delete in ``store`` (read-only). Raises
    ``sqlite3.Error`` when the store cannot be read (the caller says busy/damaged)."""
    now = time.time() if now is None else now
    with store.read() as conn:
        caps = store.capabilities(conn)
        rules = rules_for(caps)
        settings = read_settings(store.profile.home, rules)
        out = Preview(rules, settings)
        try:
            out.last_run = float(_meta(conn, caps, "last_auto_prune"))
        except (TypeError, ValueError):
            out.last_run = None  # unset or corrupt: Hermes treats it as no prior run
        if out.last_run is not None and settings.min_interval_hours is not None:
            due = out.last_run + settings.min_interval_hours * 3600
            out.due_at = due if due > now else None
        if settings.retention_days is None or settings.skip:
            return out
        out.cutoff = now - settings.retention_days * DAY
        rows = select(store, conn, caps, rules, out.cutoff, now)
    out.count = len(rows)
    out.sessions = rows[:LIST_LIMIT]
    return out


def would_prune_entry(entry, store, now: float | None = None) -> tuple[Preview | None, list[str]]:
    """``(preview, ids)``: the sessions of trash ``entry`` Hermes' next start in
    ``store``'s profile would delete again once restored ([] when auto-prune is
    off). The rule is applied to the entry's own rows (``rows.sqlite3``); lineage
    protection is left out (the rest of the conversation may be restored or not)."""
    now = time.time() if now is None else now
    try:
        found = preview(store, now)
    except sqlite3.Error:
        return None, []
    if not found.will_run or found.cutoff is None:
        return found, []
    conn = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
    try:
        tables = {r[0]: tuple(c[1] for c in conn.execute(f"PRAGMA table_info('{r[0]}')"))
                  for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "sessions" not in tables or "messages" not in tables:
            return found, []
        where, params = rule_sql(Capabilities(tables=tables), found.rules, found.cutoff)
        ids = [r[0] for r in conn.execute(f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.id", params)]
    except sqlite3.Error:
        return found, []
    finally:
        conn.close()
    return found, ids
