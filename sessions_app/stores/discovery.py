"""Find Hermes roots and the profile stores inside them.

Layout (reference section 1.1/1.2, mirroring upstream ``hermes_constants.py``):

- a root's own ``state.db`` is profile ``default``;
- ``<root>/profiles/<name>/state.db`` is profile ``<name>``; names starting with ``.``
  are not profiles, and ``<root>/profiles/.deleted/<name>`` tombstones a deleted one;
- upstream only derives owners from names matching ``[a-z0-9][a-z0-9_-]{0,63}``
  (``SessionSessionsMixin._own_profile_name``); other directories are reported as
  ignored rather than browsed.

Nothing here opens a store: discovery only lists directories and stats files.
Profile keys (what URLs carry) are looked up in the discovered set, never joined
onto a path, so a crafted key cannot reach outside a root.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

PROFILE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_PROFILE = "default"
_LABEL_RE = re.compile(r"[^a-z0-9_.-]+")


@dataclass(frozen=True)
class Profile:
    """One profile of one root.

    ``key`` is unique across all roots: the profile name, suffixed ``@<root label>``
    only when several roots are configured. ``alias`` is the Django database alias
    of its read-only connection, derived from a hash of the path so that nothing a
    user typed ever becomes part of it.
    """

    key: str
    name: str
    root: Path
    home: Path
    root_label: str = ""

    @property
    def db_path(self) -> Path:
        return self.home / "state.db"

    @property
    def alias(self) -> str:
        digest = hashlib.sha1(str(self.db_path).encode()).hexdigest()[:12]
        return f"store_{digest}"

    @property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"


@dataclass
class Discovery:
    """Result of one scan: the profiles, plus what was skipped and why."""

    roots: list[Path]
    profiles: list[Profile] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    def by_key(self) -> dict[str, Profile]:
        return {p.key: p for p in self.profiles}

    @property
    def bad_roots(self) -> list[tuple[str, str]]:
        """``(path, reason)`` for configured roots that gave no profile at all."""
        roots = {str(r) for r in self.roots}
        return [(path, reason) for path, reason in self.ignored if path in roots]


def configured_roots(explicit: list[str] | None = None) -> list[Path]:
    """Roots to scan, most specific source first.

    ``explicit`` (``--root`` or ``settings.HERMES_ROOTS``) wins; else the root of
    ``HERMES_HOME`` (two levels up when it is ``<root>/profiles/<name>``, as
    upstream ``get_default_hermes_root`` does); else ``~/.hermes`` if it exists.
    Returns absolute paths, duplicates removed, order kept. May be empty.
    """
    candidates: list[Path] = []
    if explicit:
        candidates = [Path(p).expanduser() for p in explicit if str(p).strip()]
    elif os.environ.get("HERMES_HOME"):
        home = Path(os.environ["HERMES_HOME"]).expanduser()
        if home.parent.name == "profiles":
            home = home.parent.parent
        candidates = [home]
    else:
        default = Path.home() / ".hermes"
        if default.is_dir():
            candidates = [default]
    seen: set[Path] = set()
    roots = []
    for path in candidates:
        resolved = path.resolve()
        if resolved not in seen:
            seen.add(resolved)
            roots.append(resolved)
    return roots


def _root_labels(roots: list[Path]) -> list[str]:
    labels: list[str] = []
    for root in roots:
        base = _LABEL_RE.sub("-", root.name.lower()).strip("-.") or "root"
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return labels


def _within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except ValueError:
        return False


# What makes a folder a Hermes home: upstream's markers (reference 1.2,
# hermes_constants.py _HERMES_HOME_MARKERS), and what Hermes leaves beside a store
# that is damaged or gone (reference 1.3/1.4): its WAL sidecars, quarantined or
# backed-up copies (state.db.*), sessions/ transcripts, snapshots, the sticky
# active_profile, and profiles/ (a root may hold named profiles only). A damaged
# home must still be listed: its checks are what explain the damage.
HOME_MARKERS = ("config.yaml", ".env", "state.db", "state.db-wal", "state.db-shm", "active_profile")
HOME_FOLDERS = ("profiles", "state-snapshots")
NOT_A_HOME = ("not a Hermes home (none of config.yaml, .env, state.db or its sidecars and copies, "
              "sessions/, profiles/)")


def is_hermes_home(root: Path) -> bool:
    """Whether ``root`` holds anything Hermes writes into a home (names listed and
    ``os.stat``-ed only: nothing is opened)."""
    if any((root / name).exists() for name in HOME_MARKERS) or any((root / d).is_dir() for d in HOME_FOLDERS):
        return True
    try:
        if any(name.startswith("state.db.") for name in os.listdir(root)):
            return True
        # sessions/ alone is a common folder name: only Hermes' own files count
        # (the routing mirror, or <session id>.jsonl transcripts).
        return any(name == "sessions.json" or name.endswith(".jsonl") for name in os.listdir(root / "sessions"))
    except OSError:
        return False


def discover(roots: list[Path]) -> Discovery:
    """List every profile of every root.

    A profile is listed when its home exists, even without ``state.db`` yet (its
    store then reports ``missing``). A missing root, or a folder that is not a
    Hermes home at all (:func:`is_hermes_home`, e.g. a mistyped path), is reported
    in ``ignored`` with :data:`NOT_A_HOME` and contributes no profile.
    Profile directories that are tombstoned, dot-named, badly named, or that resolve
    outside their root (a symlink) are reported in ``ignored`` and never opened.
    """
    result = Discovery(roots=list(roots))
    several = len(roots) > 1
    for root, label in zip(roots, _root_labels(roots)):
        if not root.is_dir():
            result.ignored.append((str(root), "root does not exist or is not a directory"))
            continue
        if not is_hermes_home(root):
            result.ignored.append((str(root), NOT_A_HOME))
            continue

        def key_for(name: str) -> str:
            return f"{name}@{label}" if several else name

        result.profiles.append(Profile(key_for(DEFAULT_PROFILE), DEFAULT_PROFILE, root, root, label))
        profiles_dir = root / "profiles"
        if not profiles_dir.is_dir():
            continue
        tombstones = profiles_dir / ".deleted"
        try:
            entries = sorted(os.scandir(profiles_dir), key=lambda e: e.name)
        except OSError as exc:
            result.ignored.append((str(profiles_dir), f"cannot list: {exc.strerror}"))
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            path = profiles_dir / name
            if not entry.is_dir():
                continue
            if (tombstones / name).exists():
                result.ignored.append((str(path), "tombstoned (profiles/.deleted)"))
                continue
            if not PROFILE_NAME_RE.match(name) or name == DEFAULT_PROFILE:
                result.ignored.append((str(path), "not a valid Hermes profile name"))
                continue
            if not _within(path, root):
                result.ignored.append((str(path), "resolves outside its root"))
                continue
            result.profiles.append(Profile(key_for(name), name, root, path, label))
    return result
