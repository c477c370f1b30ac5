"""Write one demo-home ``state.db`` through a real hermes-agent release, on a schedule.

Run by ``scripts/demo_home.py`` with the python of a release venv (the same cached
venvs as ``scripts/make_fixtures.py``)::

    <venv>/bin/python scripts/demo_driver.py --plan PLAN.json

The plan (written by ``demo_home.py``) holds the profile's session specs in
``fixture_driver.plan()`` shape plus, per spec, ``start`` (epoch seconds) and the
demo "stories" below. Every write goes through the release's own
``hermes_state.SessionDB``; only the clock is the plan's: ``time.time`` is
replaced by :class:`DemoClock`, so the rows carry times spread over weeks (each
message a plausible think/reply gap after the previous one) instead of the
second the script ran.

Stories (spec keys), each done the way it happens in the field:

- ``retried``: the message at that index is appended twice, 2 s apart (a flush
  retried after a timeout): a duplicate live row.
- ``request_dump`` + ``delete_keep_files``: the agent left a request dump on an API
  error; the session was later deleted through ``SessionDB.delete_session`` without
  ``sessions_dir``, so the dump stays behind (a copy holding a message the store
  lacks: ``history_lost``), beside an empty ``<id>.json`` (a true leftover).
- ``deleted_under_agent``: a CLI agent with JSON snapshots on
  (``sessions.write_json_snapshots``) writes its snapshot after every turn; after
  turn ``delete_after_turn`` the session is deleted from another terminal
  (``hermes sessions delete``, i.e. ``delete_session(sid, sessions_dir=...)``,
  which leaves ``session_<id>.json``); the agent goes on: its next append fails
  (FOREIGN KEY), ``update_token_counts`` brings the row back as ``source='unknown'``
  and the retried flush lands the later turns (hermes-agent 0.19.0 behaviour).

Stdlib-only at import time (``demo_home.py`` imports :class:`DemoClock` and
:func:`gap`); ``hermes_state`` is imported inside ``main``. Prints one JSON line:
``{"release", "schema_version", "written", "skipped", "dropped_kwargs",
"append_failures", "last"}``
where ``last`` maps session id -> epoch seconds of its last write.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _fixture_driver():
    sys.dont_write_bytecode = True
    spec = importlib.util.spec_from_file_location("fixture_driver", HERE / "fixture_driver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fd = _fixture_driver()

# Seconds between a message and the one before it, by role: a person reads and
# types, a model answers in seconds, a tool returns at once.
GAPS = {"user": (45.0, 420.0), "assistant": (4.0, 55.0), "tool": (0.6, 6.0)}


def gap(role: str, rng: random.Random) -> float:
    low, high = GAPS.get(role, (1.0, 10.0))
    return round(rng.uniform(low, high), 3)


class DemoClock:
    """The time the release code sees. ``set(t)`` jumps; every read advances by
    100 µs so two reads never return the same instant (as a real clock would)."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)

    def set(self, t: float) -> None:
        self.t = float(t)

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t

    def __call__(self) -> float:
        self.t += 0.0001
        return self.t


def seeded(session_id: str) -> random.Random:
    return random.Random(int(hashlib.sha256(session_id.encode()).hexdigest()[:12], 16))


def local_iso(ts: float) -> str:
    """Naive local ISO time, as Hermes writes ``session_start`` / ``last_updated``."""
    return dt.datetime.fromtimestamp(ts).isoformat()


def write_json(path: Path, data: dict, mtime: float) -> None:
    """Atomic write (temp file + replace, as Hermes' ``atomic_json_write``), then the
    file's mtime set to when the story wrote it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    os.utime(path, (mtime, mtime))


def snapshot(path: Path, spec: dict, messages: list[dict], start: float, now: float) -> None:
    """``sessions/session_<id>.json`` in the shape of hermes-agent 0.19.0
    ``run_agent.AIAgent._save_session_log``."""
    write_json(path, {
        "session_id": spec["id"],
        "model": spec.get("model"),
        "base_url": "https://openrouter.ai/api/v1",
        "platform": spec["source"],
        "session_start": local_iso(start),
        "last_updated": local_iso(now),
        "system_prompt": spec.get("system_prompt") or "",
        "tools": [],
        "message_count": len(messages),
        "messages": messages,
    }, now)


class DemoDriver(fd.Driver):
    """``fixture_driver.Driver`` with the demo clock and the stories above."""

    def __init__(self, db, profile: str, release: str, clock: DemoClock, sessions_dir: Path):
        super().__init__(db, profile, release)
        self.clock = clock
        self.sessions_dir = sessions_dir
        self.rng = random.Random(0)
        self.last: dict[str, float] = {}
        self.append_failures = 0  # appends refused because the row was gone (deleted_under_agent)

    def append(self, session_id: str, msg: dict) -> int:
        msg = {k: v for k, v in msg.items() if k != "retried"}
        self.clock.advance(gap(msg["role"], self.rng))
        row = super().append(session_id, msg)
        self.last[session_id] = self.clock.t
        return row

    def write_session(self, spec: dict, ids: dict) -> None:
        self.rng = seeded(spec["id"])
        self.clock.set(spec["start"])
        messages = spec["messages"]
        retried = [i for i, m in enumerate(messages) if m.get("retried")]
        if not retried:
            super().write_session(spec, ids)
        else:
            # The plain write, then the retried message again right after it.
            first = dict(spec, messages=messages[:retried[0] + 1])
            super().write_session(first, ids)
            self.clock.advance(2.0)
            again = {k: v for k, v in messages[retried[0]].items() if k != "retried"}
            fd.Driver.append(self, spec["id"], again)
            for m in messages[retried[0] + 1:]:
                self.append(spec["id"], m)
        self.last[spec["id"]] = self.clock.t
        if spec.get("request_dump"):
            self._request_dump(spec)

    def _request_dump(self, spec: dict) -> None:
        """``request_dump_<sid>_<stamp>.json`` (0.19.0 agent/agent_runtime_helpers.py shape)."""
        now = self.clock.advance(3.0)
        stamp = dt.datetime.fromtimestamp(now).strftime("%Y%m%d_%H%M%S_%f")
        body_messages = [{"role": "system", "content": spec.get("system_prompt") or ""}]
        body_messages += [{k: m[k] for k in ("role", "content") if k in m} for m in spec["messages"]]
        write_json(self.sessions_dir / f"request_dump_{spec['id']}_{stamp}.json", {
            "timestamp": local_iso(now),
            "session_id": spec["id"],
            "reason": "non_retryable_client_error",
            "request": {"method": "POST", "url": "https://openrouter.ai/api/v1/chat/completions",
                        "headers": {"Authorization": "Bearer ***", "Content-Type": "application/json"},
                        "body": {"model": spec.get("model"), "messages": body_messages, "stream": True}},
            "error": {"status_code": 400, "message": "context length exceeded"},
        }, now)

    def end(self, spec: dict, after: float) -> None:
        self.clock.set(after + spec.get("end_gap", 90.0))
        self.call("end_session", spec["id"], spec["end"])
        self.last[spec["id"]] = self.clock.t

    # -- the session deleted under a live agent

    def deleted_under_agent(self, spec: dict) -> None:
        sid = spec["id"]
        self.rng = seeded(sid)
        self.clock.set(spec["start"])
        start = spec["start"]
        self.call("create_session", sid, spec["source"], model=spec.get("model"),
                  system_prompt=spec.get("system_prompt"), cwd=spec.get("cwd"),
                  profile_name=None if self.profile == "default" else self.profile)
        path = self.sessions_dir / f"session_{sid}.json"
        memory: list[dict] = []   # the agent's in-memory conversation
        pending: list[dict] = []  # appended to memory, not yet in the store
        for number, turn in enumerate(spec["turns"], start=1):
            user, *replies = turn
            self.clock.advance(gap("user", self.rng))
            memory.append(user)
            pending.append(user)
            self.append_failures += self._flush(sid, pending)  # the user message first
            for reply in replies:
                self.clock.advance(gap(reply["role"], self.rng))
                memory.append(reply)
                pending.append(reply)
            # After the API call: usage first (CLI path: deltas), then the flush.
            self.call("update_token_counts", sid, input_tokens=1200 + 150 * number, output_tokens=180,
                      model=spec.get("model"), api_call_count=1)
            self.append_failures += self._flush(sid, pending)
            snapshot(path, spec, memory, start, self.clock())
            self.last[sid] = self.clock.t
            if number == spec["delete_after_turn"]:
                self.clock.advance(40.0)
                # `hermes sessions delete <id> --yes` in another terminal.
                self.call("delete_session", sid, sessions_dir=self.sessions_dir)
        self.written.append(spec["kind"])

    def _flush(self, sid: str, pending: list[dict]) -> int:
        """Append pending messages in order; stop at the first failure (a message
        whose append failed stays pending, as Hermes retries it next flush)."""
        while pending:
            msg = pending[0]
            kw = {k: v for k, v in msg.items() if k not in ("role", "compressed_summary", "retried")}
            try:
                self.call("append_message", sid, msg["role"], **kw)
            except Exception:  # FOREIGN KEY constraint failed: the row is gone
                return 1
            pending.pop(0)
        return 0

    # -- the whole plan

    def run_plan(self, specs: list[dict]) -> None:
        ids: dict[str, str] = {}
        deferred: list[dict] = []
        for spec in specs:
            need = spec.get("requires")
            if need and not self.capabilities.get(need):
                self.skipped.append(f"{spec['kind']} (no {need} API)")
                continue
            ids[spec["kind"]] = spec["id"]
            if spec.get("turns"):
                self.deleted_under_agent(spec)
                continue
            self.write_session(spec, ids)
            self.written.append(spec["kind"])
            if spec["end"] and spec["end_now"]:
                self.end(spec, self.last[spec["id"]])
            elif spec["end"]:
                deferred.append(spec)
            if spec.get("delete_keep_files"):
                self.clock.advance(3600.0)
                self.call("delete_session", spec["id"])  # no sessions_dir: its files stay
                # An older per-session dump beside it, holding no message: a true leftover
                # (the request dump, which holds messages, is a copy to keep: history_lost).
                write_json(self.sessions_dir / f"{spec['id']}.json", {"session_id": spec["id"], "messages": []},
                           self.clock())
        if self.capabilities["routing"]:
            self.clock.set(max(self.last.values()))
            entries = self.routing_entries([s for s in specs if s["kind"] in ids])
            scope = fd.routing_scope(self.profile)
            if hasattr(self.db, "replace_gateway_routing_entries"):
                self.call("replace_gateway_routing_entries", entries, scope=scope)
            else:
                for key, entry in entries.items():
                    self.call("save_gateway_routing_entry", key, entry, scope=scope)
        for spec in deferred:
            children = [self.last.get(s["id"], 0.0) for s in specs if s.get("parent") == spec["kind"]]
            self.end(spec, max([self.last[spec["id"]], *children]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan JSON written by demo_home.py")
    args = parser.parse_args(argv)
    plan = json.loads(Path(args.plan).read_text(encoding="utf-8"))

    clock = DemoClock(min(s["start"] for s in plan["sessions"]))
    time.time = clock  # the release stamps every row with time.time()
    import hermes_state  # the release under test; only available in its venv

    db_path = Path(plan["db"])
    sessions_dir = db_path.parent / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    db = hermes_state.SessionDB(db_path=db_path)
    driver = DemoDriver(db, plan["profile"], plan["release"], clock, sessions_dir)
    try:
        driver.run_plan(plan["sessions"])
    finally:
        db.close()  # TRUNCATE checkpoint: no -wal left behind
    json.dump({
        "release": plan["release"],
        "schema_version": getattr(hermes_state, "SCHEMA_VERSION", None),
        "written": driver.written, "skipped": driver.skipped, "dropped_kwargs": driver.dropped,
        "append_failures": driver.append_failures, "last": driver.last,
    }, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
