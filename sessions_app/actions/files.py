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


def plan_store(plan):
    """A stand-in with the ``path`` of the plan's store (what the store-file guard needs)."""
    class _Path:
        path = Path(plan.store_path)
    return _Path()


def ensure_sessions_dir(folder: Path) -> None:
    """Create a profile's missing ``sessions/`` folder with the profile folder's own
    mode (the dashboard's umask is 077, which would lock Hermes out of it when the
    dashboard runs as a member of the agents' group)."""
    if folder.is_dir():
        return
    folder.mkdir()
    try:
        os.chmod(folder, os.stat(folder.parent).st_mode & 0o777)
    except OSError:
        pass


def move_without_loss(source: Path, target: Path) -> Path:
    """Move one file, never overwriting and never losing bytes appended meanwhile.

    Same filesystem: an atomic rename (to a free name). Otherwise: copy, compare
    size and mtime with the source, then unlink; a file that changed during the copy
    is left in place (``OSError``). Returns the final target path.
    """
    final, n = target, 1
    while final.exists():
        final = target.with_name(f"{target.name}.{n}")
        n += 1
    before = os.lstat(source)
    if before.st_dev == final.parent.stat().st_dev:
        os.link(source, final, follow_symlinks=False)  # fails instead of replacing an existing name
        _unlink_if_same(source, os.lstat(final))
        return final
    shutil.copy2(source, final, follow_symlinks=False)
    after = os.lstat(source)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or final.stat().st_size != after.st_size:
        final.unlink()
        raise OSError(f"{source} changed while it was copied; left in place")
    _unlink_if_same(source, before)
    return final


def _unlink_if_same(source: Path, expected) -> None:
    """Unlink ``source`` only while it is still the file moved (same device, inode,
    size and mtime): Hermes may have replaced it by a new version meanwhile (an
    atomic rename), which must stay."""
    now = os.lstat(source)
    if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (
            expected.st_dev, expected.st_ino, expected.st_size, expected.st_mtime_ns):
        raise OSError(f"{source} was replaced while it was moved; the new file stays, a copy of the old one is "
                      "in the trash")
    os.unlink(source)


def session_files_by_id(store, ids) -> dict[str, list[str]]:
    """Names of ``ids``' files in ``store``'s ``sessions/``, by session id, from the one
    lister (``stores.session_files``): Hermes' naming rules, symlinks not followed,
    and no store's own file (a hard link to any known ``state.db`` or a sidecar)
    ever listed — moving one across filesystems would mean opening a live store
    (ground rule 5)."""
    from ..stores import registry, session_files

    ids = list(ids)
    known = [s for s in registry.stores() if s.path != store.path]
    found: dict[str, list[str]] = {}
    for f in session_files.list_session_files(store.profile.sessions_dir, known_ids=ids, only_ids=ids,
                                              store_paths=session_files.store_paths_of(store, known)):
        found.setdefault(f.session_id, []).append(f.name)
    return found


def session_file_names(store, ids) -> list[str]:
    """All of :func:`session_files_by_id`'s names, sorted."""
    return sorted(n for names in session_files_by_id(store, ids).values() for n in names)


class RemoveLeftoverFiles(Action):
    """Move ``sessions/`` files of a session that no longer exists into the trash.

    Upstream deletion removes ``<id>.json``, ``<id>.jsonl`` and
    ``request_dump_<id>_*.json`` (docs/store.md §10.1); files it left behind are moved,
    never deleted, to ``<data>/trash/files/<UTC stamp>/<profile>/sessions/``. The
    finding's evidence lists the file names (``files``). Never touches ``state.db``.
    """

    name = "remove_leftover_files"
    writes_store = False
    # The session row is gone, but a live agent may still be about to recreate it
    # (docs/store.md §10.3): registry and recent activity are checked like for any repair.
    needs_idle_session = True

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
        elif one(ctx.conn, "SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (finding.session_id,)):
            plan.blocked = "messages of this session are still in the store (its row may come back)"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def validate(self, store, plan):
        p = plan.params
        if Path(p.get("dir", "")) != store.profile.sessions_dir:
            raise ValueError("files must come from this profile's sessions/ folder")
        target = Path(p.get("target", "")).resolve()
        if not target.is_relative_to(trash_dir().resolve()):
            raise ValueError("files may only go into the dashboard's trash")
        for name in p.get("files", []):
            if "/" in name or name in ("", ".", "..") or name.startswith("state.db"):
                raise ValueError(f"not a session file name: {name!r}")

    def state(self, conn, caps, plan):
        folder = Path(plan.params["dir"])
        return {
            "session_exists": bool(one(conn, "SELECT 1 FROM sessions WHERE id = ?", (plan.session_id,))),
            "has_messages": bool(one(conn, "SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (plan.session_id,))),
            "files": {n: _stat(folder / n) for n in plan.params["files"]},
        }

    def write(self, conn, caps, plan):
        folder, target = Path(plan.params["dir"]), Path(plan.params["target"])
        target.mkdir(parents=True, exist_ok=True)
        moved = 0
        from ..stores import registry, session_files

        # Checked again right before each move (a plan stays valid for an hour): never a
        # symlink, never a store's own file under another name (docs/architecture.md §2, rule 5).
        identities = session_files.store_identities(
            session_files.store_paths_of(plan_store(plan), [s for s in registry.stores()]))
        for name in plan.params["files"]:
            source = folder / name
            if not os.path.lexists(source):
                continue
            why = session_files.refusal(source, identities)
            if why:
                raise ValueError(f"{name} is not moved: {why}")
            move_without_loss(source, target / name)
            moved += 1
        return moved

    def verify(self, conn, caps, plan):
        folder, target = Path(plan.params["dir"]), Path(plan.params["target"])
        left = [n for n in plan.params["files"] if os.path.exists(folder / n)]
        lost = [n for n in plan.params["files"] if not os.path.exists(target / n)]
        if left or lost:
            return f"not moved: {left}; missing from trash: {lost}"
        return None
