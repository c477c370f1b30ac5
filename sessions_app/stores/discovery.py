"""Find Hermes roots and the profile stores inside them.

Layout (docs/store.md §1.1/§2, mirroring upstream ``hermes_constants.py``):

- a root's own ``state.db`` is profile ``default``;
- ``<root>/profiles/<name>/state.db`` is profile ``<name>``; names starting with ``.``
  are not profiles, and ``<root>/profiles/.deleted/<name>`` tombstones a deleted one;
- upstream only derives owners from names matching ``[a-z0-9][a-z0-9_-]{0,63}``
  (``SessionSessionsMixin._own_profile_name``); other directories are reported as
  ignored rather than browsed.

Nothing here opens a store: discovery only lists directories and stats files.
Profile keys (what URLs carry) are looked up in the discovered set, never joined
onto a path, so a crafted key cannot reach outside a root.

Confinement (docs/store.md §1.2, §5.2: symlinks): every path of a profile that
the dashboard opens, lists or writes (the store and its sidecars, Hermes' copies
beside it, ``sessions/`` and each entry in it, ``runtime/active_sessions.json``,
``state-snapshots/``) must resolve (``os.path.realpath``, symlinks followed) inside
the profile's root. A symlink that stays inside the root is allowed; one that leads
out makes the whole profile skipped (:attr:`Discovery.outside`), never read or
written, since a store reached through it would be healed as if it were this
profile's (a store outside is someone else's). :func:`store_outside_reason` repeats
the store part at every open, against a link planted after the scan.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from functools import cached_property
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

    @cached_property
    def db_path(self) -> Path:
        # Computed once per profile (a frozen dataclass: the value never changes):
        # list pages ask for it a hundred times a view.
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
    # Profiles skipped because a path of theirs leads out of the root (also in
    # ``ignored``): profile key -> (profile folder, reason). A cron run reports them.
    outside: dict[str, tuple[str, str]] = field(default_factory=dict)

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
    seen: set = set()
    roots = []
    for path in candidates:
        resolved = path.resolve()
        key = file_key(resolved)  # one folder under two names (a bind mount) is one root
        if key not in seen:
            seen.add(key)
            roots.append(resolved)
    return roots


def file_key(path) -> tuple:
    """What makes two paths the same file or folder: ``(st_dev, st_ino)``, symlinks
    followed (``os.stat`` opens no descriptor: docs/architecture.md §2, rule 5), so a
    symlink, a hard link and a bind mount all meet their original; the real path for
    one that does not exist (a dangling link is judged by where it points)."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return (st.st_dev, st.st_ino)


def _root_labels(roots: list[Path]) -> list[str]:
    labels: list[str] = []
    for root in roots:
        base = _LABEL_RE.sub("-", root.name.lower()).strip("-.") or "root"
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return labels


def within(path, root) -> bool:
    """Whether ``path`` resolves (symlinks followed, ``os.path.realpath``) to ``root``
    or something under it; ``root`` is resolved the same way. A dangling link
    resolves to where it points, so it is judged by its target too."""
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def root_of_home(home) -> Path:
    """The root a profile home belongs to, by Hermes' layout: ``<root>/profiles/<name>``
    belongs to ``<root>``, any other home is its own root (upstream
    ``get_default_hermes_root``, docs/store.md §2)."""
    home = Path(os.path.abspath(home))
    return home.parent.parent if home.parent.name == "profiles" else home


# The store and its sidecars (SQLite puts them beside the resolved main file, so
# both places are checked); docs/store.md §1.2.
STORE_FILES = ("state.db", "state.db-wal", "state.db-shm", "state.db-journal")
# Other paths of a profile home the dashboard reads or writes (docs/store.md §1.3).
HOME_PATHS = ("sessions", "runtime", os.path.join("runtime", "active_sessions.json"), "state-snapshots")


def _escapes(path: Path, root: Path, shown: str) -> str | None:
    """Why ``path`` (named ``shown`` to the admin) leads out of ``root``, or None when
    it is absent or resolves inside."""
    if not os.path.lexists(path):
        return None
    if within(path, root):
        return None
    return f"{shown} resolves to {os.path.realpath(path)}, outside the root {root}"


def store_outside_reason(db_path, root=None) -> str | None:
    """Why a store's files lead out of its root (``state.db`` and its ``-wal``,
    ``-shm`` and ``-journal``, beside the link and beside its target), or None.
    ``root`` defaults to :func:`root_of_home` of the store's folder. ``lstat`` and
    ``readlink`` only: no descriptor is opened (ground rule 5).

    The rule of :func:`_escapes` for each file, with each folder and the root
    resolved once: a file that is not a symlink resolves to its folder's real path
    plus its name (every page opens a store through this: resolving each of the
    eight paths whole was ~30 ``lstat`` calls a view, issue 16)."""
    db_path = Path(db_path)
    root = Path(root) if root is not None else root_of_home(db_path.parent)
    real_dir = Path(os.path.realpath(db_path)).parent
    base = None
    for folder in dict.fromkeys((db_path.parent, real_dir)):
        real_folder = None
        for name in STORE_FILES:
            path = folder / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:  # absent (os.path.lexists says False for any OSError)
                continue
            if stat.S_ISLNK(mode):
                real = os.path.realpath(path)
            else:
                real_folder = os.path.realpath(folder) if real_folder is None else real_folder
                real = os.path.join(real_folder, name)
            base = os.path.realpath(root) if base is None else base
            if not (real == base or real.startswith(base.rstrip(os.sep) + os.sep)):
                return f"{name} resolves to {os.path.realpath(path)}, outside the root {root}"
    return None


def profile_outside_reason(home: Path, root: Path) -> str | None:
    """Why any path of the profile at ``home`` leads out of ``root``, or None.

    Checked: the home itself, the store files (:func:`store_outside_reason`), every
    ``state.db.*`` entry beside the store (Hermes' copies, ledgers and locks),
    :data:`HOME_PATHS`, and each entry of ``sessions/`` that is a symlink (a listing
    with ``d_type``: regular files need no ``stat``).
    """
    if not within(home, root):
        return f"the profile folder resolves to {os.path.realpath(home)}, outside the root {root}"
    why = store_outside_reason(home / "state.db", root)
    if why:
        return why
    try:
        with os.scandir(home) as entries:
            copies = [e.name for e in entries if e.name.startswith("state.db.")]
    except OSError:
        copies = []
    for name in sorted(copies) + list(HOME_PATHS):
        why = _escapes(home / name, root, name)
        if why:
            return why
    sessions = home / "sessions"
    try:
        with os.scandir(sessions) as entries:
            links = sorted(e.name for e in entries if e.is_symlink())
    except OSError:
        links = []
    for name in links:
        why = _escapes(sessions / name, root, f"sessions/{name}")
        if why:
            return why
    return None


# What makes a folder a Hermes home: upstream's markers (docs/store.md §2,
# hermes_constants.py _HERMES_HOME_MARKERS), and what Hermes leaves beside a store
# that is damaged or gone (docs/store.md §1.2/§1.3): its WAL sidecars, quarantined or
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
    A profile with any path leading out of its root (:func:`profile_outside_reason`),
    or whose store or ``sessions/`` is the same file as an earlier profile's (one
    store healed under two owners; the same by :func:`file_key`: through a symlink,
    a hard link or a bind mount), is skipped the same way and also listed in
    ``outside``.
    """
    result = Discovery(roots=list(roots))
    several = len(roots) > 1
    seen: dict[tuple, str] = {}  # file_key of a store or sessions/ -> profile key

    def add(profile: Profile) -> None:
        why = profile_outside_reason(profile.home, profile.root)
        if why is None:
            for kind, path in (("state.db", profile.db_path), ("sessions/", profile.sessions_dir)):
                if os.path.lexists(path):
                    owner = seen.get(file_key(path))
                    if owner is not None:
                        why = f"its {kind} is the same file as profile {owner}'s"
                        break
        if why is not None:
            reason = f"profile {profile.key} skipped, nothing of it read or written: {why}"
            shown = str(profile.home if profile.home != profile.root else profile.db_path)
            result.ignored.append((shown, reason))
            result.outside[profile.key] = (shown, reason)
            return
        for path in (profile.db_path, profile.sessions_dir):
            if os.path.lexists(path):
                seen[file_key(path)] = profile.key
        result.profiles.append(profile)
    for root, label in zip(roots, _root_labels(roots)):
        if not root.is_dir():
            result.ignored.append((str(root), "root does not exist or is not a directory"))
            continue
        if not is_hermes_home(root):
            result.ignored.append((str(root), NOT_A_HOME))
            continue

        def key_for(name: str) -> str:
            return f"{name}@{label}" if several else name

        add(Profile(key_for(DEFAULT_PROFILE), DEFAULT_PROFILE, root, root, label))
        profiles_dir = root / "profiles"
        if not profiles_dir.is_dir():
            continue
        tombstones = profiles_dir / ".deleted"
        try:
            # Real folders first: a symlinked profile that is another one under a
            # second name is then the one skipped, never the profile itself.
            entries = sorted(os.scandir(profiles_dir), key=lambda e: (e.is_symlink(), e.name))
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
            add(Profile(key_for(name), name, root, path, label))
    return result
