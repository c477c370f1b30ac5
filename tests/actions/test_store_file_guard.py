"""The store-file guard (docs/architecture.md §2, rule 5): a hard link to ``state.db``
inside ``sessions/``, named like a session's file, is never listed, so never trashed,
moved or opened with plain file I/O — checked by the kernel itself (inotify on the
``sessions/`` folder reports every open through it) while the checks, the leftover
repair and a deletion run, with the dashboard's trash on another filesystem (a move
across filesystems would have to open the file to copy it)."""

import ctypes
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest

from sessions_app.actions import deletion
from sessions_app.actions.heal import heal
from sessions_app.stores import registry

from ..conftest import ids
from .conftest import store

IN_ACCESS, IN_OPEN = 0x001, 0x020
pytestmark = pytest.mark.django_db


class OpenWatch:
    """Names of files opened through ``folder`` by any process (Linux inotify)."""

    def __init__(self, folder: Path):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        assert self.fd >= 0, ctypes.get_errno()
        assert self.libc.inotify_add_watch(self.fd, str(folder).encode(), IN_OPEN | IN_ACCESS) >= 0

    def opened(self) -> set[str]:
        names = set()
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return names
            offset = 0
            while offset < len(buf):
                _wd, _mask, _cookie, length = struct.unpack_from("iIII", buf, offset)
                name = buf[offset + 16: offset + 16 + length].rstrip(b"\0").decode()
                if name:
                    names.add(name)
                offset += 16 + length

    def close(self):
        os.close(self.fd)


@pytest.fixture
def other_fs_data(settings):
    """The data folder (backups, trash) on tmpfs, another filesystem than the stores'."""
    folder = Path(tempfile.mkdtemp(dir="/dev/shm"))
    settings.DATA_DIR = folder
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_hard_link_to_the_store_is_never_listed_moved_or_opened(aged_home, use_roots, other_fs_data):
    use_roots(aged_home)
    s = store(aged_home, "default")
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    assert os.stat(other_fs_data).st_dev != os.stat(folder).st_dev  # the trash is on another filesystem
    victim = ids("default")["hostile"]  # a session that will be deleted
    links = [f"{victim}.json", f"session_{victim}.json", "20200101_000000_0dead0.json",
             "request_dump_20200101_000000_0dead0_20200101_000000_000000.json"]
    for name in links:
        os.link(s.path, folder / name)
    inode = os.stat(s.path).st_ino
    (folder / f"{victim}.jsonl").write_text("")  # the victim's own, real file
    watch = OpenWatch(folder)
    try:
        checked = heal([s])  # every check, the leftover and history checks among them
        healed = heal([s], only=["leftover_files", "history_lost"], apply=True)
        registry.reset()
        plan = deletion.plan_for(s, victim)
        item = deletion.unsign(deletion.sign([deletion.token_item(plan)]))[0]
        done = deletion.Deleter(actor_label="test").delete(s, item)
        opened = watch.opened()
    finally:
        watch.close()
    assert done.status == "applied", done.reason
    assert not opened & set(links), opened  # never opened through sessions/
    for name in links:  # still there, still the store itself
        assert os.stat(folder / name).st_ino == inode
    assert sorted(os.listdir(done.entry.files_dir)) == [f"{victim}.jsonl"]  # only the real file went
    for report in (checked, healed):
        listed = [f for p in report["profiles"] for f in p["findings"] if f["check"] == "leftover_files"]
        assert not any(name in str(f) for f in listed for name in links)
