"""Leftover files in a profile's ``sessions/`` folder, moved into the dashboard's trash."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

from django.conf import settings

from .base import Action, Change, one


def trash_dir() -> Path:
    return Path(settings.DATA_DIR) / "trash"


def _stat(path: Path):
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


class RemoveLeftoverFiles(Action):
    """Move ``sessions/`` files of a session that no longer exists into the trash.

    Upstream deletion removes ``<id>.json``, ``<id>.jsonl`` and
    ``request_dump_<id>_*.json`` (reference 5); files it left behind are moved,
    never deleted, to ``<data>/trash/files/<UTC stamp>/<profile>/sessions/``. The
    finding's evidence lists the file names (``files``). Never touches ``state.db``.
    """

    name = "remove_leftover_files"
    heals = ("leftover_files",)
    writes_store = False
    needs_idle_session = False  # the session does not exist; the guard re-checks that

    def plan(self, ctx, finding):
        sessions_dir = ctx.store.profile.sessions_dir
        names = [n for n in (finding.evidence or {}).get("files", []) if "/" not in n and n not in ("", ".", "..")]
        stamp = dt.datetime.fromtimestamp(ctx.now, dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        target = trash_dir() / "files" / stamp / ctx.store.key / "sessions"
        plan = self.new_plan(
            ctx, finding,
            f"Move {len(names)} file(s) into the dashboard's trash ({target}).",
            changes=[Change("move", "file", {"path": str(sessions_dir / n)}, before=str(sessions_dir / n), after=str(target / n)) for n in names],
            params={"files": names, "dir": str(sessions_dir), "target": str(target)},
        )
        if not names:
            plan.blocked = "the finding names no file"
        elif one(ctx.conn, "SELECT 1 FROM sessions WHERE id = ?", (finding.session_id,)):
            plan.blocked = "the session exists"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def state(self, conn, caps, plan):
        folder = Path(plan.params["dir"])
        return {
            "session_exists": bool(one(conn, "SELECT 1 FROM sessions WHERE id = ?", (plan.session_id,))),
            "files": {n: _stat(folder / n) for n in plan.params["files"]},
        }

    def write(self, conn, caps, plan):
        folder, target = Path(plan.params["dir"]), Path(plan.params["target"])
        target.mkdir(parents=True, exist_ok=True)
        moved = 0
        for name in plan.params["files"]:
            source = folder / name
            if source.exists():
                shutil.move(str(source), str(target / name))
                moved += 1
        return moved

    def verify(self, conn, caps, plan):
        folder, target = Path(plan.params["dir"]), Path(plan.params["target"])
        left = [n for n in plan.params["files"] if os.path.exists(folder / n)]
        lost = [n for n in plan.params["files"] if not os.path.exists(target / n)]
        if left or lost:
            return f"not moved: {left}; missing from trash: {lost}"
        return None
