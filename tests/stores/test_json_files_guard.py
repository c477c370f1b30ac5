"""Small JSON documents beside a store (the active-session registry, Hermes' repair
ledger) are never opened when they are really the store under another name: a hard
link or a symlink to ``state.db`` is refused by ``stat`` alone (docs/architecture.md §2,
rule 5), so an unreadable registry is reported (which blocks deletion) and the store's
own file is not opened through it — the kernel's inotify sees every open."""

import os

import pytest

from sessions_app.stores import liveness
from sessions_app.stores.jsondecode import read_json_file

from ..actions.test_store_file_guard import OpenWatch
from ..checks.helpers import store_of


@pytest.mark.parametrize("kind", ["hard link", "symlink"])
def test_a_registry_that_is_the_store_is_refused_unopened(hermes_home, kind):
    s = store_of(hermes_home)
    runtime = s.profile.home / "runtime"
    runtime.mkdir(exist_ok=True)
    path = runtime / "active_sessions.json"
    if kind == "hard link":
        os.link(s.path, path)
    else:
        os.symlink(os.path.relpath(s.path, runtime), path)
    watch = OpenWatch(runtime)
    try:
        entries, error = liveness.read_registry(s)
        opened = watch.opened()
    finally:
        watch.close()
    assert entries == [] and error and "not read" in error
    assert "active_sessions.json" not in opened


def test_an_ordinary_json_file_is_read(tmp_path):
    (tmp_path / "a.json").write_text('{"entries": []}')
    assert read_json_file(tmp_path / "a.json") == {"entries": []}
