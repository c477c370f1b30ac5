"""Hermes' own auto-prune, previewed: its settings read as Hermes reads them, and the
sessions it deletes, checked against what the real 0.19.0 maintenance deletes."""

import os
import subprocess
import time

import pytest

from sessions_app.stores import autoprune
from tests.checks.helpers import _fixture_module, damage, release_python, store_of
from tests.conftest import ids

DAY = 86400


def settings_of(tmp_path, text, rules=autoprune.RELEASE_RULES):
    (tmp_path / "config.yaml").write_text(text)
    return autoprune.read_settings(tmp_path, rules)


def test_defaults_follow_the_store_shape(tmp_path):
    release = settings_of(tmp_path, "model:\n  default: x\n")
    assert (release.enabled, release.enabled_source, release.retention_days) == (False, "default", 90)
    newest = autoprune.read_settings(tmp_path, autoprune.NEWEST_RULES)
    assert newest.enabled is True and any("set it explicitly" in n for n in newest.notes)
    empty_section = settings_of(tmp_path, "sessions:\n")  # Hermes keeps the defaults
    assert empty_section.enabled is False and not empty_section.skip


@pytest.mark.parametrize("text, enabled, days, skip, note", [
    ("sessions:\n  auto_prune: true\n  retention_days: 30\n", True, 30, "", ""),
    ("sessions:\n  auto_prune: 'false'\n", True, 90, "", "reads as on"),
    ("sessions:\n  auto_prune: true\n  retention_days: thirty\n", True, None, "cannot read", ""),
    ("sessions:\n  auto_prune: true\n  retention_days: 12.9\n", True, 12, "", ""),
    ("sessions:\n  auto_prune: true\n  retention_days: -1\n", True, -1, "", "every ended session"),
    ("sessions:\n  auto_prune: ${PRUNE}\n", None, 90, "", "environment variable"),
    ("sessions: [1, 2]\n", False, 90, "not a mapping", ""),
    ("sessions: {auto_prune: true\n", False, 90, "", "does not parse"),
])
def test_values_are_read_as_hermes_reads_them(tmp_path, text, enabled, days, skip, note):
    found = settings_of(tmp_path, text)
    assert found.enabled is enabled
    assert found.retention_days == days
    assert skip in found.skip if skip else not found.skip
    if note:
        assert any(note in n for n in found.notes), found.notes


def test_newest_hermes_refuses_a_negative_retention(tmp_path):
    found = settings_of(tmp_path, "sessions:\n  auto_prune: true\n  retention_days: -2\n", autoprune.NEWEST_RULES)
    assert "negative" in found.skip


def test_the_managed_config_wins_key_by_key(tmp_path, monkeypatch):
    managed = tmp_path / "etc-hermes"
    managed.mkdir()
    (managed / "config.yaml").write_text("sessions:\n  retention_days: 7\n")
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(managed))
    found = settings_of(tmp_path, "sessions:\n  auto_prune: true\n  retention_days: 60\n")
    assert (found.enabled, found.retention_days, found.retention_source) == (True, 7, "managed config")


def real_maintenance(home):
    """hermes-agent 0.19.0's own startup maintenance on ``home`` (the body of its
    ``cli._run_state_db_auto_maintenance``, with its real config loader; the CLI
    module itself needs dependencies the release venv lacks)."""
    code = """
import os
from pathlib import Path
from hermes_cli.config import load_config
import hermes_state
home = Path(os.environ["HERMES_HOME"])
db = hermes_state.SessionDB(db_path=home / "state.db")
cfg = (load_config().get("sessions") or {})
if cfg.get("auto_prune", False):
    print(db.maybe_auto_prune_and_vacuum(retention_days=int(cfg.get("retention_days", 90)),
          min_interval_hours=int(cfg.get("min_interval_hours", 24)),
          vacuum=bool(cfg.get("vacuum_after_prune", True)), sessions_dir=home / "sessions"))
db.close()
"""
    env = _fixture_module()._isolated_env(home)
    proc = subprocess.run([str(release_python("0.19.0")), "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def session_ids(s):
    with s.read() as conn:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}


def test_preview_is_what_the_real_0_19_0_deletes(hermes_home):
    """Some sessions started 100 days ago (one of them ended only yesterday: 0.19.0
    ages by start), the rest are recent; auto-prune on, 90 days kept."""
    s = store_of(hermes_home)
    d = ids("default")
    old = [d["cli_main"], d["compress_root"], d["cron"], d["telegram_open"]]
    with damage(s) as conn:
        conn.execute(f"UPDATE sessions SET started_at = started_at - ? WHERE id IN ({','.join('?' * len(old))})",
                     [100 * DAY, *old])
        conn.execute("UPDATE sessions SET ended_at = ended_at - ? WHERE id IN (?, ?)",
                     (100 * DAY, d["compress_root"], d["cron"]))
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    found = autoprune.preview(s)
    assert found.will_run and found.rules is autoprune.RELEASE_RULES and found.due_at is None
    # Started 100 days ago and ended: they go, whatever their end (cli_main ended recently);
    # an open one stays; a compression parent goes without its continuation.
    assert sorted(found.ids) == sorted([d["cli_main"], d["compress_root"], d["cron"]])
    before = session_ids(s)
    out = real_maintenance(hermes_home)
    assert "'pruned': 3" in out
    assert sorted(before - session_ids(s)) == sorted(found.ids)
    again = autoprune.preview(s)  # it ran: the next start skips maintenance for a day
    assert again.last_run and again.due_at and again.due_at - time.time() > 23 * 3600


def test_off_or_skipped_deletes_nothing(hermes_home):
    s = store_of(hermes_home)
    (hermes_home / "config.yaml").write_text("sessions:\n  retention_days: 0\n")
    found = autoprune.preview(s)
    assert not found.will_run and found.settings.enabled is False
    before = session_ids(s)
    real_maintenance(hermes_home)
    assert session_ids(s) == before


def test_newest_rules_spare_pins_kept_continuations_and_live_leases(hermes_home):
    s = store_of(hermes_home, "edge")
    e = ids("edge")
    home = s.profile.home
    (home / "config.yaml").write_text("sessions:\n  retention_days: 30\n")  # auto_prune: the newest default (on)
    with damage(s) as conn:
        conn.execute("UPDATE sessions SET started_at = started_at - ?, ended_at = ended_at - ?, "
                     "last_activity_at = last_activity_at - ?", (60 * DAY,) * 3)
        conn.execute("UPDATE messages SET timestamp = timestamp - ?", (60 * DAY,))
        conn.execute("UPDATE sessions SET pinned = 1 WHERE id = ?", (e["cli_main"],))
        now = time.time()
        conn.execute("INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at) "
                     "VALUES (?, ?, ?, ?)", (e["long"], f"pid={os.getpid()}:turn=1:platform=cli", now, now + 300))
        # A message last week keeps the hostile session, whatever its start.
        conn.execute("UPDATE messages SET timestamp = ? WHERE id = (SELECT MAX(id) FROM messages "
                     "WHERE session_id = ?)", (now - 7 * DAY, e["hostile"]))
    found = autoprune.preview(s)
    assert found.will_run and found.rules is autoprune.NEWEST_RULES
    gone = set(found.ids)
    assert e["cli_main"] not in gone  # pinned
    assert e["long"] not in gone  # a live turn lease
    assert e["hostile"] not in gone  # active last week
    assert e["compress_root"] not in gone and e["compress_mid"] not in gone  # their tip is open
    assert e["cron"] in gone and e["slack_ended"] in gone and e["delegate_child"] in gone
