"""``store_outside_reason`` resolves each folder and the root once (issue 16); its
answer is the per-file rule of ``_escapes`` (each path resolved whole) on every
layout of links: the store, a sidecar or the folder linked inside or out of the
root, dangling links, links to links."""

import itertools
import os
from pathlib import Path

from sessions_app.stores.discovery import STORE_FILES, _escapes, root_of_home, store_outside_reason


def reference(db_path, root=None):
    db_path = Path(db_path)
    root = Path(root) if root is not None else root_of_home(db_path.parent)
    real_dir = Path(os.path.realpath(db_path)).parent
    for folder in dict.fromkeys((db_path.parent, real_dir)):
        for name in STORE_FILES:
            why = _escapes(folder / name, root, name)
            if why:
                return why
    return None


def test_same_answer_as_resolving_each_path_whole(tmp_path):
    kinds = ["absent", "file", "link_in", "link_out", "dangling_out", "link_to_link_out"]
    cases, answers = 0, set()
    for n, (db_kind, wal_kind, folder_linked) in enumerate(itertools.product(kinds, kinds[:5], [False, True])):
        base = tmp_path / f"c{n}"
        root, outside = base / "root", base / "outside"
        (root / "real").mkdir(parents=True)
        outside.mkdir()
        (outside / "state.db").write_bytes(b"x")
        (outside / "state.db-wal").write_bytes(b"x")
        (root / "real" / "target.db").write_bytes(b"x")
        home = root / "home"
        if folder_linked:
            home.symlink_to(root / "real")
        else:
            home.mkdir()
        for name, kind in (("state.db", db_kind), ("state.db-wal", wal_kind)):
            path = home / name
            if kind == "file":
                path.write_bytes(b"x")
            elif kind == "link_in":
                path.symlink_to(root / "real" / "target.db")
            elif kind == "link_out":
                path.symlink_to(outside / name)
            elif kind == "dangling_out":
                path.symlink_to(outside / "gone")
            elif kind == "link_to_link_out":
                (root / "real" / f"hop-{name}").symlink_to(outside / name)
                path.symlink_to(root / "real" / f"hop-{name}")
        assert store_outside_reason(home / "state.db", root) == reference(home / "state.db", root), (
            db_kind, wal_kind, folder_linked)
        assert store_outside_reason(home / "state.db") == reference(home / "state.db")
        answers.add(reference(home / "state.db", root) is None)
        cases += 1
    assert cases == 60 and answers == {True, False}
