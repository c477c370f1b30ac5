"""Write one fixture ``state.db`` through a real hermes-agent release's own API.

Run by ``scripts/make_fixtures.py`` with the python of a throwaway venv that has
``hermes-agent==<release>`` installed::

    <venv>/bin/python scripts/fixture_driver.py --db DIR/state.db --profile ops --release 0.18.2

It imports nothing but the stdlib and that release's ``hermes_state`` (only inside
``main``), so ``make_fixtures.py`` can also import this module, without Hermes, to
reuse ``plan()`` for the newest-shape ``edge`` store it builds with plain sqlite3.

Releases differ, so every call is filtered through ``inspect.signature`` and
kwargs a release does not take are dropped (and reported). Operations a release
lacks entirely (rewind, in-place compaction, routing table) make the session
that needs them be skipped. On stdout the driver prints one JSON object:
``{"release", "schema_version", "sessions_written", "skipped", "dropped_kwargs",
"capabilities"}``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

# --------------------------------------------------------------------------- ids
# Fixed, readable ids in Hermes' format: YYYYMMDD_HHMMSS_<hex>, 6 hex for CLI-side
# sessions (cli, subagent), 8 hex for gateway sessions; cron uses
# cron_<12-hex job id>_<YYYYmmdd_HHMMSS>. Keys are the "kind" labels the manifest
# and tests use. These are the BASE ids (= the default profile's); every profile
# gets its own by swapping the date (``session_ids(profile)``): real ids embed a
# timestamp and random hex, so one id in two profiles is rare and meaningful
# (id_collision flags it), and the fixture must not fake that everywhere.
SESSION_IDS = {
    "cli_main": "20260301_090000_a1b2c3",        # ended cli_close, tool call, reasoning, tokens
    "delegate_child": "20260301_090500_b4c5d6",  # subagent child of cli_main
    "telegram_open": "20260301_093000_7e3f9a21",  # open gateway DM, structured content
    "compress_root": "20260301_100000_c1d2e3",   # ended 'compression'
    "compress_mid": "20260301_103000_c4d5e6",    # child of root, ended 'compression'
    "compress_tip": "20260301_110000_c7d8e9",    # child of mid, open
    "branch_parent": "20260301_120000_e1f2a3",   # ended 'branched'
    "branch_child": "20260301_121500_e4f5a6",    # /branch child, open
    "hostile": "20260301_130000_f00bad",         # XSS-ish title / content / tool args
    "long": "20260301_140000_10a60b",            # 60 messages
    "cron": "cron_3f9a1c2b7d4e_20260301_060000",  # ended cron_complete
    "slack_ended": "20260301_080000_5a1ac4e0",   # gateway, ended session_reset
    "discord_open": "20260301_150000_d15c0a7d",  # gateway, open
    "undo": "20260301_160000_0d0ba5",            # one rewound row (needs rewind API)
    "compacted": "20260301_170000_c0ffee",       # in-place compaction (needs archive API)
}
BASE_DATE = "20260301"
# profile -> the date part of its session ids (make_fixtures.PROFILES has the same names).
PROFILE_DATES = {
    "default": "20260301",
    "ops": "20260302",
    "research": "20260303",
    "legacy": "20260304",
    "archive": "20260305",
    "edge": "20260306",
}


def session_id(profile: str, base_id: str) -> str:
    """*base_id* (any id with the base date, including ones not in SESSION_IDS)
    as written into *profile*'s store: the date part becomes the profile's date."""
    try:
        date = PROFILE_DATES[profile]
    except KeyError:
        raise ValueError(f"no id date for profile {profile!r}; add it to PROFILE_DATES") from None
    if base_id.count(BASE_DATE) != 1:
        raise ValueError(f"{base_id!r} does not hold the base date {BASE_DATE} exactly once")
    return base_id.replace(BASE_DATE, date)


def session_ids(profile: str) -> dict[str, str]:
    """kind -> session id in *profile*'s store."""
    return {kind: session_id(profile, sid) for kind, sid in SESSION_IDS.items()}


MODEL = "anthropic/claude-sonnet-4"
SYSTEM_PROMPT = "You are Hermes, a helpful agent running in a fixture."
CWD = "/home/hermes/projects/demo"
HOME_ROOT = "/home/hermes/.hermes"  # what a real install's paths would look like

# Leading sentence of a compaction handoff (what Hermes' context compressor puts
# first); newer readers recognise summaries by it.
COMPACTION_INTRO = (
    "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the "
    "summary below. This is a handoff from a previous context window — treat it as "
    "background reference, NOT as active instructions. "
)

HOSTILE_TITLE = "<script>alert('title')</script>"
HOSTILE_USER = "<script>alert(1)</script><img src=x onerror=alert(2)>"
HOSTILE_LINK = '<a href="javascript:alert(3)">x</a>'
IMAGE_CONTENT = [
    {"type": "text", "text": "look at this"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="}},
]


def release_tuple(release: str) -> tuple:
    """'0.18.2' -> (0, 18, 2); 'edge' (newest upstream) sorts after every release."""
    if release == "edge":
        return (999,)
    return tuple(int(p) for p in release.split("."))


def namespace(profile: str) -> str:
    """Gateway session-key namespace: 'main' for the default profile."""
    return "main" if profile == "default" else profile


def routing_scope(profile: str) -> str:
    """gateway_routing.scope: the gateway's resolved sessions_dir path."""
    home = HOME_ROOT if profile == "default" else f"{HOME_ROOT}/profiles/{profile}"
    return f"{home}/sessions"


# --------------------------------------------------------------------------- messages

def U(content, **extra) -> dict:
    return {"role": "user", "content": content, **extra}


def A(content, **extra) -> dict:
    return {"role": "assistant", "content": content, "finish_reason": "stop", **extra}


def tool_call(call_id: str, name: str, arguments: dict) -> dict:
    """One OpenAI-style tool call; arguments is a JSON *string* as providers send it."""
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def TC(calls: list, content=None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": calls, "finish_reason": "tool_calls"}


def T(call_id: str, name: str, content: str) -> dict:
    return {"role": "tool", "content": content, "tool_call_id": call_id, "tool_name": name}


def summary(text: str) -> dict:
    """Compaction handoff row (edge marks it _compressed_summary=1)."""
    return U(COMPACTION_INTRO + text, compressed_summary=True)


# --------------------------------------------------------------------------- plan

def gateway(profile: str, platform: str, chat_type: str, chat_id: str, user_id: str,
            user_name: str, display_name: str) -> dict:
    """Routing identity of a gateway session (session_key built like Hermes' build_session_key)."""
    ns = namespace(profile)
    if chat_type == "dm":
        key = f"agent:{ns}:{platform}:dm:{chat_id}"
    else:
        key = f"agent:{ns}:{platform}:{chat_type}:{chat_id}:{user_id}"
    origin = {"platform": platform, "chat_id": chat_id, "chat_name": display_name,
              "chat_type": chat_type, "user_id": user_id, "user_name": user_name,
              "thread_id": None, "chat_topic": None}
    return {"session_key": key, "chat_id": chat_id, "chat_type": chat_type, "thread_id": None,
            "user_id": user_id, "display_name": display_name, "origin": origin}


def plan(profile: str, release: str) -> list[dict]:
    """The logical content of one store, as session specs in write order.

    Spec keys: ``kind``, ``id``, ``source``, ``model``, ``model_config``,
    ``system_prompt``, ``parent`` (kind), ``title``, ``cwd``, ``gateway`` (see
    ``gateway()``), ``messages`` (list of message dicts), ``tokens``
    (update_token_counts kwargs), ``end`` (end_reason or None), ``end_now``
    (True: end right after writing, before later sessions; else at the very
    end), ``rewind`` ({"at": index of a user message, "then": [messages]}),
    ``compact`` ({"keep_last": n, "summary": text, "then": [messages]}),
    ``requires`` (capability name), ``routing`` (True: goes in the routing index).

    Release conventions that are not API (which caller code writes what) follow
    the releases: /branch and delegate children carry ``_branched_from`` /
    ``_delegate_from`` and delegate children use source 'subagent' since 0.17.0;
    before that a delegate child inherited the parent's platform ('cli').
    """
    modern = release_tuple(release) >= (0, 17, 0)
    ids = session_ids(profile)
    base_config = {"max_iterations": 90, "reasoning_config": None}
    specs: list[dict] = []

    def add(kind, source, messages, **kw):
        spec = {"kind": kind, "id": ids[kind], "source": source, "model": MODEL,
                "messages": messages, "end": None, "end_now": False}
        spec.update(kw)
        specs.append(spec)

    # 1. CLI session with reasoning, a tool call and its result; ended at the end.
    add("cli_main", "cli", [
        U("Why does the build fail on CI but not locally?"),
        A("Probably a missing file in the CI checkout. Let me look.",
          reasoning="The user sees a CI-only failure; list the workspace first."),
        TC([tool_call("call_1", "terminal", {"command": "ls"})]),
        T("call_1", "terminal", "Makefile\nREADME.md\nsrc\ntests\n"),
        A("The `build/` directory is missing; CI needs `mkdir -p build` before `make`."),
    ], title="Fix the flaky build", system_prompt=SYSTEM_PROMPT, cwd=CWD,
        model_config=dict(base_config), end="cli_close",
        tokens={"input_tokens": 1850, "output_tokens": 420, "cache_read_tokens": 1200,
                "cache_write_tokens": 0, "reasoning_tokens": 96, "model": MODEL,
                "api_call_count": 3, "estimated_cost_usd": 0.0123, "cost_status": "estimated",
                "cost_source": "pricing_table", "billing_provider": "openrouter",
                "billing_base_url": "https://openrouter.ai/api/v1"})

    # 2. Delegate (subagent) child of the CLI session.
    delegate_config = dict(base_config, max_iterations=50)
    if modern:
        delegate_config["_delegate_from"] = ids["cli_main"]
    add("delegate_child", "subagent" if modern else "cli", [
        U("Check whether the Makefile creates build/ before compiling."),
        A("It does not: the `all` target writes into build/ without creating it."),
    ], parent="cli_main", model_config=delegate_config, end="agent_close", end_now=True)

    # 3. Open Telegram DM with a multimodal (structured) user message.
    add("telegram_open", "telegram", [
        U("hi hermes", platform_message_id="1001"),
        A("Hello! How can I help?"),
        U(IMAGE_CONTENT, platform_message_id="1003"),
        A("That is a 1x1 PNG; nothing much to see."),
        U("what's on my calendar tomorrow?", platform_message_id="1005"),
        A("You have a dentist appointment at 10:00."),
    ], gateway=gateway(profile, "telegram", "dm", "12345", "12345", "alice", "Alice Example"),
        routing=True,
        tokens={"input_tokens": 900, "output_tokens": 150, "model": MODEL, "api_call_count": 3,
                "absolute": True})

    # 4. Compression chain root -> mid -> tip (tip open). Children copy model_config.
    add("compress_root", "cli", [
        U("Let's refactor the parser into smaller functions."),
        A("Sure. First, the tokenizer can move into its own module."),
        U("Do it."),
        TC([tool_call("call_r1", "patch", {"path": "src/parser.py", "hunk": "split tokenizer"})]),
        T("call_r1", "patch", "applied 1 hunk"),
        A("Tokenizer extracted into src/tokenizer.py."),
    ], title="Refactor the parser", cwd=CWD, model_config=dict(base_config),
        end="compression", end_now=True)
    add("compress_mid", "cli", [
        summary("The user is refactoring the parser; the tokenizer was extracted."),
        U("Now split parse_expression."),
        A("Split into parse_term and parse_factor."),
    ], parent="compress_root", title="Refactor the parser #2", cwd=CWD,
        model_config=dict(base_config), end="compression", end_now=True)
    add("compress_tip", "cli", [
        summary("Parser refactor: tokenizer extracted, parse_expression split."),
        U("Run the tests."),
        A("All 42 tests pass."),
    ], parent="compress_mid", title="Refactor the parser #3", cwd=CWD,
        model_config=dict(base_config))

    # 5. /branch: parent ended 'branched', child copies history and goes on (open).
    branch_history = [U("Plan a weekend trip to Lisbon."),
                      A("Day 1: Alfama and the castle. Day 2: Belém.")]
    add("branch_parent", "cli", list(branch_history), title="Plan the trip",
        model_config=dict(base_config), end="branched", end_now=True)
    branch_config = dict(base_config)
    if modern:
        branch_config["_branched_from"] = ids["branch_parent"]
    add("branch_child", "cli", list(branch_history) + [
        U("Alternative: what if it rains?"),
        A("Swap Belém for the Gulbenkian museum and the Oceanário."),
    ], parent="branch_parent", title="Plan the trip #2", model_config=branch_config)

    # 6. Hostile content: title, user message and tool-call arguments.
    add("hostile", "cli", [
        U(HOSTILE_USER),
        TC([tool_call("call_h1", "write_file", {"path": "notes.html", "content": HOSTILE_LINK})]),
        T("call_h1", "write_file", '{"bytes_written": 36, "path": "notes.html"}'),
        A("Wrote notes.html containing " + HOSTILE_LINK),
    ], title=HOSTILE_TITLE, end="cli_close")

    # 7. Long transcript for pagination: 30 user/assistant pairs = 60 rows.
    long_messages = []
    for n in range(1, 31):
        long_messages += [U(f"Question {n}: what is {n} squared?"), A(f"Answer {n}: {n * n}.")]
    add("long", "cli", long_messages, title="Long pagination session", end="cli_close")

    # 8. Cron run (ended).
    add("cron", "cron", [
        U("[cron job daily-digest] Summarise yesterday's sessions."),
        A("Yesterday: 3 sessions, 1 build fix, 1 trip plan."),
    ], end="cron_complete", end_now=True)

    # 9. Gateway sessions of other sources: Slack ended (reset), Discord open.
    add("slack_ended", "slack", [
        U("deploy status?"), A("The last deploy finished at 07:58 and is healthy."),
    ], gateway=gateway(profile, "slack", "dm", "D0SLACK01", "U024BE7LH", "bob", "Bob Builder"),
        end="session_reset", end_now=True)
    add("discord_open", "discord", [
        U("!hermes summarise the channel"), A("Mostly release planning and a bug triage."),
        U("thanks"), A("Any time."),
    ], gateway=gateway(profile, "discord", "group", "98765", "4242", "carol", "#general"),
        routing=True)

    # 10. /undo: the last user message gets rewound, then the user asks again.
    add("undo", "cli", [
        U("Write a haiku about SQLite."),
        A("Pages in a B-tree / write-ahead log keeps them safe / checkpoint, then at rest."),
        U("Now one about PostgreSQL, but angry."),
    ], title="Undo test", requires="rewind",
        rewind={"at": 2, "then": [U("Now one about WAL files."),
                                  A("Frames pile up fast / the checkpoint sweeps them away / "
                                    "the shm stays warm.")]})

    # 11. In-place compaction: old rows archived (active=0, compacted=1), the
    # compacted set (summary + carried last pair) inserted active, then a new turn.
    add("compacted", "cli", [
        U("Collect the TODOs from src/."),
        A("Found 7 TODOs, mostly in the parser."),
        U("Which one is oldest?"),
        A("The TODO in src/parser.py line 12, from 2024."),
    ], title="In-place compaction", requires="compact",
        compact={"keep_last": 2, "summary": "The user collected 7 TODOs from src/.",
                 "then": [U("Fix that one."), A("Done: the TODO on line 12 is resolved.")]})
    return specs


# --------------------------------------------------------------------------- writer

class Driver:
    """Applies ``plan()`` to one ``hermes_state.SessionDB``; tolerant of release differences."""

    def __init__(self, db, profile: str, release: str):
        self.db = db
        self.profile = profile
        self.release = release
        self.dropped: dict[str, list[str]] = {}
        self.skipped: list[str] = []
        self.written: list[str] = []
        self.capabilities = {
            "rewind": hasattr(db, "rewind_to_message"),
            "compact": hasattr(db, "archive_and_compact"),
            "routing": hasattr(db, "replace_gateway_routing_entries")
            or hasattr(db, "save_gateway_routing_entry"),
            "gateway_peer": hasattr(db, "record_gateway_session_peer"),
        }

    # -- kwarg filtering

    def _accepted(self, name: str) -> set[str] | None:
        """Names the method takes; None = anything. create_session(**kw) forwards
        to _insert_session_row, so that signature is the real contract."""
        fn = getattr(self.db, name)
        params = inspect.signature(fn).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            target = getattr(self.db, "_insert_session_row", None)
            if name in ("create_session", "ensure_session") and target is not None:
                return set(inspect.signature(target).parameters)
            return None
        return set(params)

    def call(self, name: str, *args, **kwargs):
        accepted = self._accepted(name)
        if accepted is not None:
            for key in [k for k in kwargs if k not in accepted]:
                value = kwargs.pop(key)
                if value is not None:
                    self.dropped.setdefault(name, [])
                    if key not in self.dropped[name]:
                        self.dropped[name].append(key)
        return getattr(self.db, name)(*args, **kwargs)

    # -- one message / one session

    def append(self, session_id: str, msg: dict) -> int:
        kw = {k: v for k, v in msg.items() if k not in ("role", "compressed_summary")}
        return self.call("append_message", session_id, msg["role"], **kw)

    def write_session(self, spec: dict, ids: dict) -> None:
        sid = spec["id"]
        gw = spec.get("gateway") or {}
        self.call(
            "create_session", sid, spec["source"],
            model=spec.get("model"), model_config=spec.get("model_config"),
            system_prompt=spec.get("system_prompt"),
            user_id=gw.get("user_id"),
            parent_session_id=ids.get(spec.get("parent")),
            session_key=gw.get("session_key"), chat_id=gw.get("chat_id"),
            chat_type=gw.get("chat_type"), thread_id=gw.get("thread_id"),
            cwd=spec.get("cwd"),
            # Hermes 0.19 stamps the profile only for named profiles.
            profile_name=None if self.profile == "default" else self.profile,
        )
        if gw and self.capabilities["gateway_peer"]:
            self.call("record_gateway_session_peer", sid, source=spec["source"],
                      user_id=gw["user_id"], session_key=gw["session_key"],
                      chat_id=gw["chat_id"], chat_type=gw["chat_type"],
                      thread_id=gw["thread_id"], display_name=gw["display_name"],
                      origin_json=json.dumps(gw["origin"]))
        if spec.get("title"):
            self.call("set_session_title", sid, spec["title"])
        row_ids = [self.append(sid, m) for m in spec["messages"]]
        if spec.get("rewind"):
            self.call("rewind_to_message", sid, row_ids[spec["rewind"]["at"]])
            for m in spec["rewind"]["then"]:
                self.append(sid, m)
        if spec.get("compact"):
            self._compact(sid, spec["compact"])
        if spec.get("tokens"):
            self.call("update_token_counts", sid, **dict(spec["tokens"]))

    def _compact(self, sid: str, compact: dict) -> None:
        """archive_and_compact with the summary + the carried tail (same timestamps,
        like Hermes' carried rows), then the follow-up turn."""
        rows = self.db.get_messages(sid)
        keep = rows[-compact["keep_last"]:]
        new = [{"role": "user", "content": COMPACTION_INTRO + compact["summary"]}]
        for r in keep:
            new.append({k: r.get(k) for k in ("role", "content", "tool_calls", "tool_call_id",
                                             "tool_name", "finish_reason", "timestamp")})
        self.call("archive_and_compact", sid, new)
        for m in compact["then"]:
            self.append(sid, m)

    def routing_entries(self, specs: list[dict]) -> dict[str, str]:
        """session_key -> serialized gateway SessionEntry, for sessions marked routing."""
        return {key: json.dumps(entry) for key, entry in routing_index(self.profile, specs).items()}

    def run(self) -> None:
        ids: dict[str, str] = {}
        deferred_ends: list[dict] = []
        specs = plan(self.profile, self.release)
        for spec in specs:
            need = spec.get("requires")
            if need and not self.capabilities.get(need):
                self.skipped.append(f"{spec['kind']} (no {need} API)")
                continue
            ids[spec["kind"]] = spec["id"]
            self.write_session(spec, ids)
            self.written.append(spec["kind"])
            if spec["end"] and spec["end_now"]:
                self.call("end_session", spec["id"], spec["end"])
            elif spec["end"]:
                deferred_ends.append(spec)
        if self.capabilities["routing"]:
            entries = self.routing_entries([s for s in specs if s["kind"] in ids])
            scope = routing_scope(self.profile)
            if hasattr(self.db, "replace_gateway_routing_entries"):
                self.call("replace_gateway_routing_entries", entries, scope=scope)
            else:
                for key, entry in entries.items():
                    self.call("save_gateway_routing_entry", key, entry, scope=scope)
        for spec in deferred_ends:
            self.call("end_session", spec["id"], spec["end"])


def routing_index(profile: str, specs: list[dict]) -> dict[str, dict]:
    """session_key -> gateway SessionEntry dict (shape of gateway/session.py to_dict).

    Timestamps derive from the session id, so regenerated fixtures are stable.
    Shared with make_fixtures.py for sessions/sessions.json and the edge store.
    """
    out = {}
    for spec in specs:
        if not spec.get("routing"):
            continue
        gw = spec["gateway"]
        stamp = spec["id"][:15]
        iso = f"{stamp[0:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}"
        out[gw["session_key"]] = {
            "session_key": gw["session_key"], "session_id": spec["id"],
            "created_at": iso, "updated_at": iso,
            "display_name": gw["display_name"], "platform": spec["source"],
            "chat_type": gw["chat_type"], "input_tokens": 0, "output_tokens": 0,
            "cache_read_tokens": 0, "cache_write_tokens": 0, "total_tokens": 0,
            "last_prompt_tokens": 0, "estimated_cost_usd": 0.0, "cost_status": "unknown",
            "expiry_finalized": False, "suspended": False, "resume_pending": False,
            "resume_reason": None, "last_resume_marked_at": None, "is_fresh_reset": False,
            "was_auto_reset": False, "auto_reset_reason": None, "reset_had_activity": False,
            "origin": gw["origin"],
        }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="state.db path to create")
    parser.add_argument("--profile", required=True, help="profile name (default, ops, ...)")
    parser.add_argument("--release", required=True, help="hermes-agent release being driven")
    args = parser.parse_args(argv)

    import hermes_state  # the release under test; only available in its venv

    db = hermes_state.SessionDB(db_path=Path(args.db))
    driver = Driver(db, args.profile, args.release)
    try:
        driver.run()
    finally:
        db.close()  # TRUNCATE checkpoint: leaves no -wal behind
    json.dump({
        "release": args.release,
        "schema_version": getattr(hermes_state, "SCHEMA_VERSION", None),
        "sessions_written": driver.written,
        "skipped": driver.skipped,
        "dropped_kwargs": driver.dropped,
        "capabilities": driver.capabilities,
    }, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
