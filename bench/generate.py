"""Generate big Hermes homes for the benchmarks (``bench/run.py``).

    .venv/bin/python bench/generate.py --messages 1000000 --out var/bench/home-1m
    .venv/bin/python bench/generate.py --messages 100000 --out var/bench/home-100k --edge-messages 0

Every store starts from a store a real release wrote (``tests/fixtures/hermes_home``,
copied with SQLite's backup API, never with file I/O): the ``default`` profile
from the store hermes-agent 0.19.0 created through its own ``SessionDB`` (schema
22, legacy inline FTS), the ``edge`` profile from the newest-shape store (schema
31, external-content FTS, ``(session_id, id)`` index, ``last_activity_at``), the
older profiles from the 0.18.2/0.17.0/0.15.0/0.13.0 stores. Rows are then
bulk-inserted with plain sqlite3 in the store's own schema (only the columns the
store has), ``executemany`` in big transactions. The stores' own FTS triggers stay
in place, so both full-text indexes are exactly what Hermes would have written.

What the ``default`` profile holds for ``--messages M`` (M = 1,000,000 gives the
issue's shape):

- ``M / 50`` sessions (20,000), message ids interleaved across sessions in write
  order, timestamps over the last 180 days; one session of ``0.3 M`` messages
  (300,000: a Telegram DM that never ends) and one of exactly 100 messages;
- sources cli, telegram, discord, slack, whatsapp, cron, subagent (delegate
  children with ``_delegate_from``), api_server; gateway rows with session keys,
  origins and routing entries; per-session usage rows; 8 KB system prompts;
- turns of user / assistant, assistant tool calls (1-3) answered by tool rows,
  reasoning on some replies, 0.5 % of tool outputs 20-200 KB long;
- compression chains (2-4 segments, the child opening with Hermes' compaction
  summary; 0.19.0 leaves gateway children without a session key, as it does,
  docs/store.md §8.4), in-place compactions (``active = 0,
  compacted = 1`` plus summary and carried rows) and rewinds (``active = 0``,
  ``rewind_count``, ``message_count`` not lowered, as 0.17-0.19 do);
- a sprinkle of each damage kind the field shows (see ``damage``), a few of each;
- search terms of known selectivity: ``zanzibar`` (~1 in 20,000 messages),
  ``kubernetes`` (~1 %), ``deploy`` (~10 %).

The home has 10 profiles: ``default`` (above), ``edge`` (the same generator in the
newest shape, ``--edge-messages``, default M), ``ops``/``research``/``legacy``/
``archive`` (0.18.2 ... 0.13.0 stores plus ``M / 50`` messages each), ``team-a``/
``team-b`` (0.19.0), ``cron-box`` (newest shape) and ``damaged`` (0.19.0 with its
full-text index smashed and a repair ledger at its cap). ``manifest.json`` in the
home names the sessions and terms the runner uses.

Generated under ``var/bench`` (gitignored), never committed.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import json
import math
import os
import random
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE_HOME = REPO / "tests" / "fixtures" / "hermes_home"
DAY = 86400.0

SUMMARY_PREFIX = "[CONTEXT COMPACTION — REFERENCE ONLY] "
SEARCH_TERMS = {"rare": "zanzibar", "medium": "kubernetes", "common": "deploy"}
TERM_RATES = {"zanzibar": 1 / 20000, "kubernetes": 1 / 100, "deploy": 1 / 10}
TOOLS = ("terminal", "read_file", "write_file", "search_files", "patch", "web_search",
         "browser_navigate", "execute_code")
MODELS = ("anthropic/claude-sonnet-4", "openai/gpt-5", "nousresearch/hermes-4-405b", "google/gemini-2.5-pro")
GATEWAYS = ("telegram", "discord", "slack", "whatsapp")
SOURCE_WEIGHTS = (("cli", 38), ("telegram", 14), ("discord", 7), ("slack", 5), ("whatsapp", 3),
                  ("cron", 15), ("subagent", 8), ("api_server", 5), ("acp", 5))
END_REASONS = {"cli": "cli_close", "cron": "cron_complete", "subagent": "delegate_complete",
               "api_server": "api_close", "acp": "acp_close"}

# Profiles of the home: name -> (fixture store to start from, share of M messages).
HOME_PROFILES = (
    ("ops", "profiles/ops/state.db"),
    ("research", "profiles/research/state.db"),
    ("legacy", "profiles/legacy/state.db"),
    ("archive", "profiles/archive/state.db"),
    ("team-a", "state.db"),
    ("team-b", "state.db"),
    ("cron-box", "profiles/edge/state.db"),
    ("damaged", "state.db"),
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- stores

def copy_store(src: Path, dst: Path) -> None:
    """Copy a store with SQLite's online backup API (ground rule 5: no file I/O on a
    store); the copy keeps the source's header, so WAL mode and schema come along."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{dst}{suffix}").unlink(missing_ok=True)
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    target = sqlite3.connect(dst)
    try:
        source.backup(target, pages=-1)
    finally:
        source.close()
        target.close()


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


@dataclass
class Shape:
    """What the store has: column sets and whether it is the newest shape."""

    session_cols: set
    message_cols: set
    tables: set
    newest: bool

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> "Shape":
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return cls(set(columns(conn, "sessions")), set(columns(conn, "messages")), tables,
                   "last_activity_at" in set(columns(conn, "sessions")))


# --------------------------------------------------------------------------- text

class Corpus:
    """Deterministic pseudo-English: Zipf-weighted words, sliced for message texts."""

    COMMON = ("the to and a of in is that for it you this with on be file error test build run "
              "function value config path line output check fix change update return import "
              "module server request response data table query index page session message user "
              "agent tool call result status log issue branch commit merge review patch").split()
    BANNED = set(SEARCH_TERMS.values())

    def __init__(self, rng: random.Random, words: int = 8000, length: int = 3_000_000):
        syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in ("a", "e", "i", "o", "u", "ai", "ou", "ee")]
        vocab = list(self.COMMON)
        seen = set(vocab) | self.BANNED
        while len(vocab) < words:
            w = "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
            if w not in seen:
                seen.add(w)
                vocab.append(w)
        weights = [1 / (i + 1) ** 1.05 for i in range(len(vocab))]
        picked = rng.choices(vocab, weights=weights, k=length // 6)
        for i in range(0, len(picked), 14):  # sentences
            picked[i] = picked[i].capitalize()
            if i:
                picked[i - 1] += "."
        self.text = " ".join(picked)
        self.size = len(self.text)

    def slice(self, rng: random.Random, n: int) -> str:
        n = max(1, min(n, self.size - 2))
        if n > self.size // 2:  # long outputs: repeat slices
            parts, left = [], n
            while left > 0:
                take = min(left, self.size // 2)
                parts.append(self.slice(rng, take))
                left -= take
            return "\n".join(parts)
        off = rng.randrange(0, self.size - n - 1)
        space = self.text.find(" ", off)
        start = space + 1 if 0 <= space < off + 20 else off
        return self.text[start:start + n].strip()


# --------------------------------------------------------------------------- plan

@dataclass
class SessionPlan:
    idx: int
    id: str
    source: str
    n: int  # message rows to write (copies, summary and rewound rows included)
    start: float
    end: float
    parent: str | None = None
    end_reason: str | None = None
    open: bool = False
    summary_first: bool = False  # a compression child: starts with the compaction summary
    gateway: dict | None = None
    delegate_from: str | None = None
    compact: bool = False
    rewind: bool = False
    title: str | None = None
    model: str = MODELS[0]
    # filled while writing
    active: int = 0
    rewound: int = 0
    calls: int = 0
    last_ts: float = 0.0
    first_user: int | None = None
    extra: dict = field(default_factory=dict)


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _stamp(ts: float) -> str:
    return time.strftime("%Y%m%d_%H%M%S", time.gmtime(ts))


def session_id(rng: random.Random, source: str, ts: float, taken: set) -> str:
    while True:
        if source == "cron":
            sid = f"cron_{_hex(rng, 12)}_{_stamp(ts)}"
        else:
            sid = f"{_stamp(ts)}_{_hex(rng, 8 if source in GATEWAYS else 6)}"
        if sid not in taken:
            taken.add(sid)
            return sid


def _sizes(rng: random.Random, count: int, total: int) -> list[int]:
    """``count`` session sizes (>= 2) summing to ``total``: log-normal, heavy tail."""
    raw = [rng.lognormvariate(0, 1.1) for _ in range(count)]
    scale = (total - 2 * count) / sum(raw)
    sizes = [2 + int(r * scale) for r in raw]
    diff = total - sum(sizes)
    i = 0
    while diff:
        step = 1 if diff > 0 else -1
        j = i % count
        if sizes[j] + step >= 2:
            sizes[j] += step
            diff -= step
        i += 1
    return sizes


def gateway_identity(rng: random.Random, profile: str, source: str, n: int) -> dict:
    ns = "main" if profile == "default" else profile
    chat_type = rng.choice(("dm", "dm", "group"))
    chat_id = str(100000 + n)
    user_id = str(500000 + n)
    key = f"agent:{ns}:{source}:{chat_type}:{chat_id}" + (f":{user_id}" if chat_type == "group" else "")
    return {"session_key": key, "chat_id": chat_id, "chat_type": chat_type, "user_id": user_id,
            "display_name": f"User {n}", "origin": {"platform": source, "chat_id": chat_id,
                                                    "chat_type": chat_type, "user_id": user_id,
                                                    "user_name": f"user{n}"}}


def plan_sessions(rng: random.Random, profile: str, messages: int, sessions: int, big: int,
                  now: float) -> list[SessionPlan]:
    """The sessions of one store. The first plan is the big session (``big`` rows, if
    any), the second the 100-message one; the rest share what is left."""
    t0, t1 = now - 180 * DAY, now - 2 * 3600
    taken: set = set()
    plans: list[SessionPlan] = []
    fixed = []
    if big:
        fixed.append(("telegram", big))
    if messages - big >= 100 + 2 * max(0, sessions - len(fixed) - 1):
        fixed.append(("cli", 100))
    rest_count = max(0, sessions - len(fixed))
    rest_total = messages - sum(n for _, n in fixed)
    sizes = list(n for _, n in fixed) + (_sizes(rng, rest_count, rest_total) if rest_count else [])
    sources = [s for s, w in SOURCE_WEIGHTS for _ in range(w)]
    for i, n in enumerate(sizes):
        source = fixed[i][0] if i < len(fixed) else rng.choice(sources)
        if i == 0 and big:
            start, end = t0 + DAY, t1
        else:
            duration = n * rng.uniform(20, 120)
            start = rng.uniform(t0, max(t0 + 1, t1 - duration))
            end = start + duration
        plan = SessionPlan(i, session_id(rng, source, start, taken), source, n, start, end,
                           model=rng.choice(MODELS))
        if source in GATEWAYS:
            plan.gateway = gateway_identity(rng, profile, source, i)
        if i < len(fixed):
            plan.title = "The very long Telegram chat" if (i == 0 and big) else "A 100-message session"
            plan.open = i == 0 and bool(big)
        else:
            plan.title = f"{rng.choice(Corpus.COMMON).capitalize()} {rng.choice(Corpus.COMMON)} #{i}" \
                if rng.random() < 0.7 else None
            plan.open = rng.random() < 0.01
            plan.compact = n > 30 and rng.random() < 0.01
            plan.rewind = n > 10 and rng.random() < 0.01
        plan.end_reason = None if plan.open else END_REASONS.get(source, rng.choice(("session_reset", "idle")))
        plans.append(plan)
    # Delegate children: subagent sessions hang under a cli session running at their start.
    clis = [p for p in plans[len(fixed):] if p.source == "cli"]
    clis.sort(key=lambda p: p.start)
    starts = [p.start for p in clis]
    import bisect
    for p in plans[len(fixed):]:
        if p.source == "subagent" and clis:
            j = max(0, bisect.bisect_right(starts, p.start) - 1)
            parent = clis[j]
            p.parent, p.delegate_from = parent.id, parent.id
    # Compression chains: ~4 % of cli/gateway sessions continue in 1-3 further segments,
    # made of sessions taken from the pool (their sizes are kept).
    pool = [p for p in plans[len(fixed):] if p.source in ("cli",) + GATEWAYS and p.parent is None]
    rng.shuffle(pool)
    heads = pool[: len(pool) // 25]
    spare = pool[len(pool) // 25:]
    for head in heads:
        prev = head
        for _ in range(rng.randint(1, 3)):
            if not spare:
                break
            child = spare.pop()
            child.source = head.source
            child.gateway = None
            if head.gateway:
                # 0.19.0 does not give a compression child its parent's routing
                # identity (note 7); the newest shape does (set by the writer).
                child.extra["inherit_gateway"] = head.gateway
            child.start = prev.end + rng.uniform(1, 30)
            child.end = child.start + child.n * rng.uniform(20, 120)
            child.parent = prev.id
            child.summary_first = True
            child.compact = child.rewind = False
            prev.end_reason, prev.open = "compression", False
            child.end_reason = END_REASONS.get(child.source, "session_reset")
            prev = child
    return plans


# --------------------------------------------------------------------------- rows

# Message tuple order used between the generators and the writer.
ROW = ("session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp",
       "token_count", "finish_reason", "reasoning", "platform_message_id", "active", "compacted",
       "_compressed_summary")


class Texts:
    def __init__(self, rng: random.Random, corpus: Corpus):
        self.rng = rng
        self.corpus = corpus

    def _marked(self, text: str) -> str:
        r = self.rng.random()
        if r < TERM_RATES["zanzibar"]:
            text = f"zanzibar {text}"
        if self.rng.random() < TERM_RATES["kubernetes"]:
            text = f"{text} kubernetes"
        if self.rng.random() < TERM_RATES["deploy"]:
            text = f"deploy {text}"
        return text

    def user(self) -> str:
        return self._marked(self.corpus.slice(self.rng, int(self.rng.lognormvariate(4.6, 0.8)) + 5))

    def assistant(self) -> str:
        return self._marked(self.corpus.slice(self.rng, int(self.rng.lognormvariate(5.8, 0.8)) + 10))

    def tool_output(self) -> str:
        if self.rng.random() < 0.005:
            return self.corpus.slice(self.rng, self.rng.randint(20_000, 200_000))
        return self._marked(self.corpus.slice(self.rng, int(self.rng.lognormvariate(6.2, 1.0)) + 10))

    def arguments(self, tool: str) -> str:
        rng = self.rng
        if tool == "terminal":
            return json.dumps({"command": f"pytest -q tests/{self.corpus.slice(rng, 20).split(' ')[0]}"})
        if tool in ("read_file", "write_file", "patch"):
            return json.dumps({"path": f"src/{self.corpus.slice(rng, 12).split(' ')[0]}.py"})
        return json.dumps({"query": self.corpus.slice(rng, 40)})


def turn_lengths(rng: random.Random, n: int) -> list[int]:
    """Split ``n`` rows into turns: 2 (user, reply), 3 (user, reply in two parts) or
    4+ (user, tool-call groups, final reply)."""
    out, left = [], n
    while left > 0:
        if left <= 12:
            if left == 1 and out:
                out[-1] += 1
            else:
                out.append(max(left, 2))
            break
        length = 2 if rng.random() < 0.45 else rng.randint(4, 12)
        out.append(length)
        left -= length
    return out


def session_rows(plan: SessionPlan, rng: random.Random, texts: Texts, newest: bool):
    """Yield ``(write_time, idx, k, row)`` for one session, write_time ascending.

    Counters (active rows, rewound rows, tool calls in active rows) are kept on the plan.
    """
    n = plan.n
    step = (plan.end - plan.start) / max(1, n)
    k = 0
    written = 0
    history: list[tuple] = []  # active rows so far, for compaction
    last_turn: list[tuple] = []  # the last active turn: carried over by a compaction
    compact_at = n // 2 if plan.compact else -1
    rewind_turn = -1
    turns = turn_lengths(rng, max(2, n - (1 if plan.summary_first else 0) - (5 if plan.compact else 0)))
    if plan.rewind and len(turns) > 2:
        rewind_turn = rng.randrange(1, len(turns) - 1)
    pmid = 1000

    def clock() -> float:
        nonlocal k
        k += 1
        return plan.start + k * step + rng.uniform(0, step / 3)

    def emit(row: list, active: int = 1, compacted: int = 0, at: float | None = None):
        """Count the row on the plan; merge key = write time (``at``, else its timestamp)."""
        nonlocal written
        ts = row[6]
        row[11], row[12] = active, compacted
        if active:
            plan.active += 1
            if row[4]:
                plan.calls += len(json.loads(row[4]))
        elif not compacted:
            plan.rewound += 1
        plan.last_ts = max(plan.last_ts, ts)
        written += 1
        return (at if at is not None else ts, plan.idx, written, tuple(row))

    sid = plan.id
    if plan.summary_first:
        ts = clock()
        yield emit([sid, "user", SUMMARY_PREFIX + texts.assistant(), None, None, None, ts, None, None,
                    None, None, 1, 0, 1])
    for t, length in enumerate(turns):
        if compact_at >= 0 and written >= compact_at and last_turn:
            yield from _compaction(plan, emit, history, last_turn, clock, texts)
            compact_at = -1
        rewound = t == rewind_turn
        active = 0 if rewound else 1
        rows: list[list] = []
        ts = clock()
        rows.append([sid, "user", texts.user(), None, None, None, ts, None, None, None,
                     str(pmid) if plan.source in GATEWAYS else None, 1, 0, 0])
        pmid += 1
        middle = length - 2
        if length == 1:
            middle = -1
        elif length == 3:
            rows.append([sid, "assistant", texts.assistant(), None, None, None, clock(), rng.randint(50, 900),
                         "length", None, None, 1, 0, 0])
            middle = 0
        while middle >= 2:
            calls = min(middle - 1, rng.choice((1, 1, 1, 2, 3)))
            ids = [f"call_{_hex(rng, 16)}" for _ in range(calls)]
            names = [rng.choice(TOOLS) for _ in range(calls)]
            payload = json.dumps([{"id": cid, "type": "function",
                                   "function": {"name": name, "arguments": texts.arguments(name)}}
                                  for cid, name in zip(ids, names)])
            rows.append([sid, "assistant", "", None, payload, None, clock(), rng.randint(20, 200),
                         "tool_calls", texts.corpus.slice(rng, 200) if rng.random() < 0.2 else None,
                         None, 1, 0, 0])
            for cid, name in zip(ids, names):
                rows.append([sid, "tool", texts.tool_output(), cid, None, name, clock(), None, None, None,
                             None, 1, 0, 0])
            middle -= 1 + calls
        if middle == 1:  # one row left over: a two-part reply
            rows.append([sid, "assistant", texts.assistant(), None, None, None, clock(), rng.randint(50, 900),
                         "length", None, None, 1, 0, 0])
        if length >= 2:
            rows.append([sid, "assistant", texts.assistant(), None, None, None, clock(), rng.randint(50, 900),
                         "stop", texts.corpus.slice(rng, 300) if rng.random() < 0.2 else None, None, 1, 0, 0])
        emitted = [emit(row, active=active) for row in rows]
        if active:
            history.extend(e[3] for e in emitted)
            last_turn = [e[3] for e in emitted]
        yield from emitted


def _compaction(plan, emit, history, last_turn, clock, texts):
    """In-place compaction as 0.18.2/0.19.0 ``archive_and_compact`` leaves it: the live
    rows so far become ``active = 0, compacted = 1`` (the writer does that when it
    meets the summary, see ``compact_before_write``), then the summary and a copy of
    the last turn (original timestamps, note 4) are written as fresh active rows."""
    plan.extra["compact_before_write"] = True
    plan.active -= len(history)
    plan.calls -= sum(len(json.loads(r[4])) for r in history if r[4])
    ts = clock()
    yield emit([plan.id, "user", SUMMARY_PREFIX + texts.assistant(), None, None, None, ts, None, None, None,
                None, 1, 0, 1])
    for row in last_turn:
        yield emit(list(row), active=1, at=clock())
    history.clear()


# --------------------------------------------------------------------------- writer

class Writer:
    """Bulk-inserts plans and rows into one store with plain sqlite3."""

    BATCH = 20_000
    COMMIT_EVERY = 250_000

    def __init__(self, path: Path, profile: str, rng: random.Random, corpus: Corpus, now: float):
        self.path = path
        self.profile = profile
        self.rng = rng
        self.corpus = corpus
        self.texts = Texts(rng, corpus)
        self.now = now
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA synchronous=OFF")
        self.conn.execute("PRAGMA cache_size=-512000")
        self.conn.execute("PRAGMA foreign_keys=OFF")
        self.shape = Shape.read(self.conn)
        self.next_id = (self.conn.execute("SELECT MAX(id) FROM messages").fetchone()[0] or 0) + 1

    def close(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()

    # -- sessions

    PROMPTS = None

    def _prompt(self, i: int) -> str:
        if Writer.PROMPTS is None:
            rng = random.Random(99)
            Writer.PROMPTS = [f"You are Hermes, variant {j}.\n" + self.corpus.slice(rng, 8000) for j in range(5)]
        return Writer.PROMPTS[i % 5]

    def _session_row(self, p: SessionPlan) -> dict:
        gw = p.gateway
        if gw is None and self.shape.newest and p.extra.get("inherit_gateway"):
            gw = p.extra["inherit_gateway"]
        model_config = {"max_iterations": 90}
        if p.delegate_from:
            model_config["_delegate_from"] = p.delegate_from
        row = {
            "id": p.id, "source": p.source, "model": p.model, "model_config": json.dumps(model_config),
            "parent_session_id": p.parent, "started_at": p.start, "title": p.title,
            "user_id": gw and gw["user_id"], "session_key": gw and gw["session_key"],
            "chat_id": gw and gw["chat_id"], "chat_type": gw and gw["chat_type"],
            "display_name": gw and gw["display_name"], "origin_json": gw and json.dumps(gw["origin"]),
            "cwd": "/home/hermes/work" if p.source == "cli" else None,
            "profile_name": None if self.profile == "default" and not self.shape.newest else self.profile,
            "created_source": p.source, "title_source": "llm" if p.title else None,
        }
        if self.shape.newest:
            prompt = self._prompt(p.idx)
            row["system_prompt_hash"] = hashlib.sha256(prompt.encode()).hexdigest()
        else:
            row["system_prompt"] = self._prompt(p.idx)
        return row

    def _insert(self, table: str, rows: list[dict], cols_avail: set) -> None:
        if not rows:
            return
        cols = [c for c in rows[0] if c in cols_avail]
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        self.conn.executemany(sql, ([r.get(c) for c in cols] for r in rows))

    def write(self, plans: list[SessionPlan]) -> None:
        conn, shape = self.conn, self.shape
        for p in plans:  # releases before 0.17 have neither rewinds nor compaction
            p.compact = p.compact and "compacted" in shape.message_cols
            p.rewind = p.rewind and "active" in shape.message_cols
        conn.execute("BEGIN")
        if shape.newest and "system_prompts" in shape.tables:
            rows = []
            for j in range(5):
                prompt = self._prompt(j)
                rows.append((hashlib.sha256(prompt.encode()).hexdigest(), prompt))
            conn.executemany("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", rows)
        self._insert("sessions", [self._session_row(p) for p in plans], shape.session_cols)
        conn.execute("COMMIT")
        self._messages(plans)
        self._finish_sessions(plans)

    def _messages(self, plans: list[SessionPlan]) -> None:
        shape = self.shape
        cols = [c for c in ROW if c in shape.message_cols]
        extra = ["id"] + (["display_order"] if "display_order" in shape.message_cols else [])
        index = [ROW.index(c) for c in cols]
        sql = (f"INSERT INTO messages ({', '.join(extra + cols)}) "
               f"VALUES ({', '.join('?' * (len(extra) + len(cols)))})")
        gens = [session_rows(p, random.Random(self.rng.random()), Texts(random.Random(self.rng.random()), self.corpus),
                             shape.newest) for p in plans]
        batch: list = []
        since_commit = 0
        started = time.monotonic()
        total = sum(p.n for p in plans)
        written = 0
        self.conn.execute("BEGIN")
        archive: dict[str, int] = {}
        for _, idx, _, row in heapq.merge(*gens, key=lambda item: (item[0], item[1], item[2])):
            mid = self.next_id
            self.next_id += 1
            plan = plans[idx]
            if plan.extra.pop("compact_before_write", False):
                # Compaction archives every live row written so far (flush first).
                self._flush(sql, batch)
                batch = []
                self.conn.execute(
                    "UPDATE messages SET active = 0, compacted = 1 WHERE session_id = ? AND active = 1",
                    (plan.id,))
            values = [mid] + ([mid] if len(extra) == 2 else []) + [row[i] for i in index]
            batch.append(values)
            if len(batch) >= self.BATCH:
                self._flush(sql, batch)
                batch = []
            since_commit += 1
            written += 1
            if since_commit >= self.COMMIT_EVERY:
                self._flush(sql, batch)
                batch = []
                self.conn.execute("COMMIT")
                self.conn.execute("BEGIN")
                since_commit = 0
                rate = written / (time.monotonic() - started)
                log(f"  {self.profile}: {written:,}/{total:,} messages ({rate:,.0f}/s)")
        self._flush(sql, batch)
        self.conn.execute("COMMIT")

    def _flush(self, sql: str, batch: list) -> None:
        if batch:
            self.conn.executemany(sql, batch)

    def _finish_sessions(self, plans: list[SessionPlan]) -> None:
        """Counters, ends, usage, routing: what the agent writes as a session goes on."""
        shape, conn, rng = self.shape, self.conn, self.rng
        conn.execute("BEGIN")
        updates = []
        for p in plans:
            count = p.active if shape.newest else p.active + p.rewound  # 0.17-0.19 keep rewound rows counted
            ended = None if p.open else p.last_ts + rng.uniform(1, 60)
            calls_api = max(1, p.active // 2)
            row = {"message_count": count, "tool_call_count": p.calls, "ended_at": ended,
                   "end_reason": None if p.open else p.end_reason, "api_call_count": calls_api,
                   "input_tokens": calls_api * 3000, "output_tokens": calls_api * 400,
                   "rewind_count": 1 if p.rewound else 0, "last_activity_at": p.last_ts or p.start,
                   "estimated_cost_usd": round(calls_api * 0.004, 4), "cost_status": "estimated"}
            updates.append(row | {"id": p.id})
        cols = [c for c in updates[0] if c != "id" and c in shape.session_cols]
        conn.executemany(f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                         ([u[c] for c in cols] + [u["id"]] for u in updates))
        if "session_model_usage" in shape.tables:
            usage_cols = set(columns(conn, "session_model_usage"))
            rows = [{"session_id": p.id, "model": p.model, "billing_provider": "openrouter",
                     "billing_base_url": "https://openrouter.ai/api/v1", "billing_mode": "", "task": "",
                     "api_call_count": max(1, p.active // 2), "input_tokens": max(1, p.active // 2) * 3000,
                     "output_tokens": max(1, p.active // 2) * 400, "estimated_cost_usd": 0.01,
                     "actual_cost_usd": 0, "cost_status": "estimated", "first_seen": p.start,
                     "last_seen": p.last_ts or p.start} for p in plans if p.source in ("cli", "acp")]
            if "task" in usage_cols:
                # Auxiliary calls (0.19.0 record_auxiliary_usage): a title for one session in
                # three, recorded in session_model_usage only. Chosen by the id's hash, so
                # the generator's random sequence (and everything else it makes) is unchanged.
                rows += [{"session_id": p.id, "model": "google/gemini-2.5-flash", "billing_provider": "openrouter",
                          "billing_base_url": "https://openrouter.ai/api/v1", "billing_mode": "",
                          "task": "title_generation", "api_call_count": 1, "input_tokens": 800, "output_tokens": 20,
                          "estimated_cost_usd": 0.0002, "actual_cost_usd": 0, "first_seen": p.start,
                          "last_seen": p.start} for p in plans
                         if int(hashlib.sha256(p.id.encode()).hexdigest()[:8], 16) % 3 == 0]
            self._insert("session_model_usage", rows, usage_cols)
        if "gateway_routing" in shape.tables:
            scope = "/home/hermes/.hermes/sessions" if self.profile == "default" \
                else f"/home/hermes/.hermes/profiles/{self.profile}/sessions"
            latest: dict[str, SessionPlan] = {}
            for p in plans:
                gw = p.gateway or (p.extra.get("inherit_gateway") if shape.newest else None)
                if gw and (gw["session_key"] not in latest or latest[gw["session_key"]].start < p.start):
                    latest[gw["session_key"]] = p
            conn.executemany(
                "INSERT OR REPLACE INTO gateway_routing(scope, session_key, entry_json, updated_at) VALUES (?,?,?,?)",
                [(scope, key, json.dumps({"session_key": key, "session_id": p.id, "platform": p.source}),
                  p.last_ts or p.start) for key, p in latest.items()])
        conn.execute("COMMIT")


# --------------------------------------------------------------------------- damage

def damage(writer: Writer, plans: list[SessionPlan], home: Path, per_kind: int = 3) -> dict:
    """A few of each damage kind, applied the way the field does it (a writer with
    foreign keys off, files left in ``sessions/``, a lock of a dead process).

    Returns ``{kind: [session ids]}``. Not generated: store-level damage that would
    stop the benchmarks themselves (``store_corrupt``, ``schema_malformed``, WAL
    trouble); ``fts_damaged`` lives in the ``damaged`` profile.
    """
    conn, rng, shape = writer.conn, writer.rng, writer.shape
    small = [p for p in plans[2:] if 6 <= p.n <= 60 and not p.parent and not p.summary_first
             and not p.compact and not p.rewind and p.source == "cli"]
    parents = {p.parent for p in plans if p.parent}
    small = [p for p in small if p.id not in parents]
    rng.shuffle(small)
    if not small:
        return {}
    # Tiny stores (the smoke test) have too few sessions: kinds then share them.
    pick = itertools.cycle(small)
    out: dict[str, list[str]] = {}
    now = writer.now

    def take(kind: str, k: int = per_kind) -> list[SessionPlan]:
        chosen = [next(pick) for _ in range(k)]
        out[kind] = [p.id for p in chosen]
        return chosen

    def rows_of(sid: str, where: str = "1") -> list[tuple]:
        return conn.execute(f"SELECT id, role, content, tool_call_id, tool_calls, tool_name, timestamp "
                            f"FROM messages WHERE session_id = ? AND {where} ORDER BY id", (sid,)).fetchall()

    def append(sid: str, role: str, content: str, **cols) -> int:
        mid = writer.next_id
        writer.next_id += 1
        values = {"id": mid, "session_id": sid, "role": role, "content": content,
                  "timestamp": cols.pop("timestamp", now - 3 * DAY), "active": 1, "compacted": 0, **cols}
        if "display_order" in shape.message_cols:
            values["display_order"] = mid
        keys = [c for c in values if c in shape.message_cols]
        conn.execute(f"INSERT INTO messages ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})",
                     [values[c] for c in keys])
        return mid

    conn.execute("BEGIN")
    for p in take("orphan_messages"):
        conn.execute("DELETE FROM sessions WHERE id = ?", (p.id,))  # FK off: rows and usage stay
    for i, p in enumerate(take("dangling_parent")):
        conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (f"20250101_000000_gone{i:02d}", p.id))
    a, b = take("lineage_cycle", 2)
    conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (b.id, a.id))
    conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (a.id, b.id))
    for p in take("compression_without_continuation"):
        conn.execute("UPDATE sessions SET end_reason = 'compression', ended_at = COALESCE(ended_at, ?) WHERE id = ?",
                     (p.last_ts + 5, p.id))
    parent, c1, c2 = take("multiple_continuations", 3)
    conn.execute("UPDATE sessions SET end_reason = 'compression', ended_at = ? WHERE id = ?", (parent.last_ts + 1, parent.id))
    for c in (c1, c2):
        conn.execute("UPDATE sessions SET parent_session_id = ?, ended_at = NULL, end_reason = NULL, source = ? "
                     "WHERE id = ?", (parent.id, parent.source, c.id))
    for p in take("unanswered_turn"):
        append(p.id, "user", "are you still there?", timestamp=p.last_ts + 30)
        conn.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (p.id,))
    for p in take("counter_drift"):
        conn.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (p.id,))
    usage_ids = []
    for i in range(per_kind):
        sid = f"{_stamp(now - 5 * DAY)}_{_hex(rng, 6)}"
        usage_ids.append(sid)
        row = {"id": sid, "source": "cli", "started_at": now - 5 * DAY, "ended_at": now - 5 * DAY + 60,
               "end_reason": "cli_close", "api_call_count": 4, "input_tokens": 12000, "output_tokens": 900,
               "message_count": 0, "profile_name": None if writer.profile == "default" else writer.profile}
        writer._insert("sessions", [row], shape.session_cols)
    out["usage_without_transcript"] = usage_ids
    for i, p in enumerate(take("orphan_tool_result")):
        tool = rows_of(p.id, "role = 'tool'")
        if tool:
            conn.execute("UPDATE messages SET tool_call_id = ? WHERE id = ?", (f"call_ghost{i}", tool[0][0]))
        else:
            append(p.id, "tool", "stray output", tool_call_id=f"call_ghost{i}", tool_name="terminal",
                   timestamp=p.last_ts + 1)
            conn.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (p.id,))
    for i, p in enumerate(take("unanswered_tool_call")):
        calls = json.dumps([{"id": f"call_lost{i}", "type": "function",
                             "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}])
        append(p.id, "assistant", "", tool_calls=calls, timestamp=p.last_ts + 1, finish_reason="tool_calls")
        append(p.id, "user", "never mind, thanks", timestamp=p.last_ts + 2)
        append(p.id, "assistant", "All right.", timestamp=p.last_ts + 3, finish_reason="stop")
        conn.execute("UPDATE sessions SET message_count = message_count + 3, tool_call_count = tool_call_count + 1 "
                     "WHERE id = ?", (p.id,))
    for p in take("duplicate_live_rows"):
        last = rows_of(p.id, "role = 'assistant'")[-1]
        append(p.id, "assistant", last[2], timestamp=last[6] + 0.5, finish_reason="stop")
        conn.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (p.id,))
    for p in take("timestamp_disorder"):
        rows = rows_of(p.id)
        mid = rows[len(rows) // 2]
        conn.execute("UPDATE messages SET timestamp = ? WHERE id = ?", (mid[6] - 7200, mid[0]))
    for p in take("stale_open"):
        conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL, source = 'cli' WHERE id = ?", (p.id,))
    if "session_key" in shape.session_cols:
        for i, p in enumerate(take("owner_mismatch")):
            key = f"agent:ops:telegram:dm:{900000 + i}"
            conn.execute("UPDATE sessions SET source = 'telegram', session_key = ? WHERE id = ?", (key, p.id))
    if writer.profile != "default" and "profile_name" in shape.session_cols:
        for p in take("missing_owner"):
            conn.execute("UPDATE sessions SET profile_name = NULL WHERE id = ?", (p.id,))
    for p in take("placeholder_session", 2):
        conn.execute("UPDATE sessions SET source = 'unknown' WHERE id = ?", (p.id,))
    if "compression_locks" in shape.tables:
        p = take("stale_lease", 1)[0]
        conn.execute("INSERT OR REPLACE INTO compression_locks(session_id, holder, acquired_at, expires_at) "
                     "VALUES (?, ?, ?, ?)", (p.id, "pid=999999:tid=1:agent=bench:nonce=00ff", now - 3 * DAY,
                                             now - 3 * DAY + 300))
    if "gateway_routing" in shape.tables:
        conn.execute("INSERT OR REPLACE INTO gateway_routing(scope, session_key, entry_json, updated_at) VALUES (?,?,?,?)",
                     ("/home/hermes/.hermes/sessions", "agent:main:telegram:dm:31337",
                      json.dumps({"session_key": "agent:main:telegram:dm:31337", "session_id": "20250101_000000_gone99"}),
                      now - DAY))
    out["orphan_dependents"] = out["orphan_messages"][:1]
    fts = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name = 'messages_fts' "
                                      "AND sql NOT LIKE '%content=%'")]
    if fts:  # inline index: a few rows missing from it (an interrupted rebuild did that)
        victims = take("fts_incomplete", 1)[0]
        for mid, *_ in rows_of(victims.id)[:3]:
            conn.execute("DELETE FROM messages_fts WHERE rowid = ?", (mid,))
    conn.execute("COMMIT")
    # Files beside the store: a transcript copy longer than the store, leftovers.
    sessions_dir = home / "sessions" if writer.profile == "default" else home / "profiles" / writer.profile / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    for p in take("transcript_on_disk_only", 2):
        with open(sessions_dir / f"{p.id}.jsonl", "w") as fh:
            fh.write(json.dumps({"role": "session_meta", "session_id": p.id}) + "\n")
            for _, role, content, call_id, calls, tool, ts in rows_of(p.id):
                line = {"role": role, "content": content, "timestamp": ts}
                if call_id:
                    line["tool_call_id"] = call_id
                if calls:
                    line["tool_calls"] = json.loads(calls)
                fh.write(json.dumps(line) + "\n")
            fh.write(json.dumps({"role": "user", "content": "one more thing, zanzibar"}) + "\n")
            fh.write(json.dumps({"role": "assistant", "content": "Noted."}) + "\n")
    gone = []
    for i in range(2):
        sid = f"20250101_000000_gone{50 + i}"
        gone.append(sid)
        (sessions_dir / f"request_dump_{sid}_20250101_000000_000001.json").write_text("{}")
    out["leftover_files"] = gone
    return out


def smash_fts(path: Path) -> None:
    """Overwrite the root page of ``messages_fts_data`` (the ``fts_damaged`` kind).
    Plain file I/O on a copy nothing holds open (tests do the same)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages_fts_data'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(b"\xff" * size)


# --------------------------------------------------------------------------- home

def build_store(path: Path, source: Path, profile: str, messages: int, sessions: int, big: int,
                corpus: Corpus, seed: int, now: float, home: Path, with_damage: bool, fresh: bool = False) -> dict:
    started = time.monotonic()
    copy_store(source, path)
    if fresh:
        _empty(path)
    rng = random.Random(f"{seed}:{profile}")
    writer = Writer(path, profile, rng, corpus, now)
    plans = plan_sessions(rng, profile, messages, sessions, big, now) if messages else []
    if plans:
        writer.write(plans)
    damaged = damage(writer, plans, home) if with_damage and plans else {}
    counts = writer.conn.execute("SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages)").fetchone()
    writer.close()
    info = {
        "store": str(path.relative_to(home)), "from": str(source.relative_to(REPO)),
        "newest_shape": writer.shape.newest, "sessions": counts[0], "messages": counts[1],
        "bytes": path.stat().st_size, "seconds": round(time.monotonic() - started, 1), "damage": damaged,
    }
    if plans:
        info["big_session"] = plans[0].id if big else None
        small = next((p for p in plans if p.n == 100 and p.title == "A 100-message session"), None)
        info["small_session"] = small.id if small else None
        # Ids of the 300k session at 1/4, 1/2 and the end: "deep pages" for the runner.
        if big:
            ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            ids = [r[0] for r in ro.execute(
                "SELECT id FROM messages NOT INDEXED WHERE session_id = ? ORDER BY id", (plans[0].id,))]
            ro.close()
            info["big_session_rows"] = len(ids)
            info["big_session_marks"] = {"first": ids[0], "middle": ids[len(ids) // 2],
                                         "last_page": ids[max(0, len(ids) - 100)]}
    log(f"  {profile}: {counts[1]:,} messages, {counts[0]:,} sessions, "
        f"{info['bytes'] / 2**20:,.0f} MiB in {info['seconds']} s")
    return info


def _empty(path: Path) -> None:
    """Drop the fixture's rows from a second copy of a release store (schema, triggers
    and metadata stay), so that profiles do not share the fixture's session ids.
    Messages go before sessions: newest-shape FTS triggers read the session row."""
    conn = sqlite3.connect(path, isolation_level=None)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.execute("BEGIN")
    for table in ("messages", "session_model_usage", "gateway_routing", "compression_locks",
                  "session_turn_leases", "sessions", "system_prompts"):
        if table in tables:
            conn.execute(f"DELETE FROM {table}")
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def build_home(out: Path, messages: int, edge_messages: int | None = None, seed: int = 7,
               profiles: int = 10, sessions: int | None = None, big_share: float = 0.3,
               others_share: float = 0.02) -> dict:
    """Build the whole home; returns (and writes) its manifest."""
    now = time.time()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.yaml").write_text("# hermes-admin benchmark home (bench/generate.py)\n")
    corpus = Corpus(random.Random(seed))
    sessions = sessions or max(4, messages // 50)
    big = int(messages * big_share) if messages >= 1000 else 0
    edge_messages = messages if edge_messages is None else edge_messages
    manifest = {"generated_by": "bench/generate.py", "created_at": now, "seed": seed,
                "messages": messages, "sessions": sessions, "search_terms": SEARCH_TERMS, "profiles": {}}
    started = time.monotonic()
    log(f"[default] 0.19.0 store, {messages:,} messages")
    manifest["profiles"]["default"] = build_store(out / "state.db", FIXTURE_HOME / "state.db", "default",
                                                  messages, sessions, big, corpus, seed, now, out, True)
    extra = [("edge", "profiles/edge/state.db")] + list(HOME_PROFILES)
    for name, rel in extra[: max(0, profiles - 1)]:
        n = edge_messages if name == "edge" else int(messages * others_share)
        s = max(4, n // 50) if n else 0
        b = int(n * big_share) if name == "edge" and n >= 1000 else 0
        log(f"[{name}] {rel}, {n:,} messages")
        (out / "profiles" / name).mkdir(parents=True, exist_ok=True)
        (out / "profiles" / name / "config.yaml").write_text(f"# benchmark profile {name}\n")
        info = build_store(out / "profiles" / name / "state.db", FIXTURE_HOME / rel, name, n, s, b,
                           corpus, seed, now, out, name in ("edge", "team-a"),
                           fresh=name in ("team-a", "team-b", "cron-box", "damaged"))
        manifest["profiles"][name] = info
        if name == "damaged":
            smash_fts(out / "profiles" / name / "state.db")
            (out / "profiles" / name / "state.db.repair-attempts.json").write_text(
                json.dumps({"failed_attempts": 3, "last_error": "database disk image is malformed"}))
            info["damage"] = {"fts_damaged": ["messages_fts_data root page"], "repair_leftovers": ["ledger"]}
    if "team-a" in manifest["profiles"]:
        _collide(out, manifest)
    manifest["seconds"] = round(time.monotonic() - started, 1)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    log(f"home {out} built in {manifest['seconds']} s")
    return manifest


def _collide(out: Path, manifest: dict) -> None:
    """``id_collision``: one session row of ``default`` also in ``team-a``."""
    src = sqlite3.connect(f"file:{out / 'state.db'}?mode=ro", uri=True)
    row = src.execute("SELECT id, source, started_at FROM sessions WHERE source = 'cli' ORDER BY started_at LIMIT 1").fetchone()
    src.close()
    dst = sqlite3.connect(out / "profiles" / "team-a" / "state.db")
    dst.execute("INSERT OR IGNORE INTO sessions(id, source, started_at, profile_name) VALUES (?, ?, ?, 'team-a')", row)
    dst.commit()
    dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    dst.close()
    manifest["profiles"]["team-a"]["damage"]["id_collision"] = [row[0]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages in the default profile")
    parser.add_argument("--sessions", type=int, default=None, help="sessions there (default messages / 50)")
    parser.add_argument("--edge-messages", type=int, default=None,
                        help="messages in the newest-shape 'edge' profile (default: --messages; 0 = none added)")
    parser.add_argument("--profiles", type=int, default=10, help="profiles in the home (1-10)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "var" / "bench" / "home-1m")
    args = parser.parse_args(argv)
    build_home(args.out.resolve(), args.messages, args.edge_messages, args.seed, args.profiles, args.sessions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
