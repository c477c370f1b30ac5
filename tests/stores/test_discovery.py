"""Profile discovery: roots, profiles, and what is skipped (docs/store.md §1.1/§2)."""

import os

import pytest

from sessions_app.stores.discovery import configured_roots, discover


def make_home(root, *profiles, default_db=True):
    root.mkdir(parents=True, exist_ok=True)
    if default_db:
        (root / "state.db").write_bytes(b"")
    for name in profiles:
        (root / "profiles" / name).mkdir(parents=True, exist_ok=True)
        (root / "profiles" / name / "state.db").write_bytes(b"")
    return root


def test_no_root_configured_and_no_dot_hermes(monkeypatch, tmp_path):
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert configured_roots([]) == []
    assert discover([]).profiles == []


def test_dot_hermes_is_the_fallback_root(monkeypatch, tmp_path):
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    make_home(tmp_path / ".hermes")
    assert configured_roots([]) == [(tmp_path / ".hermes").resolve()]


def test_hermes_home_of_a_named_profile_means_its_root(monkeypatch, tmp_path):
    root = make_home(tmp_path / "h", "work")
    monkeypatch.setenv("HERMES_HOME", str(root / "profiles" / "work"))
    assert configured_roots([]) == [root.resolve()]


def test_explicit_roots_win_over_hermes_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_HOME", str(make_home(tmp_path / "a")))
    b = make_home(tmp_path / "b")
    assert configured_roots([str(b)]) == [b.resolve()]


def test_default_and_named_profiles(tmp_path):
    root = make_home(tmp_path / "home", "work", "research")
    found = discover([root.resolve()])
    assert [(p.key, p.name) for p in found.profiles] == [
        ("default", "default"), ("research", "research"), ("work", "work")
    ]
    assert found.by_key()["work"].db_path == root.resolve() / "profiles" / "work" / "state.db"


def test_profile_without_state_db_is_listed(tmp_path):
    root = make_home(tmp_path / "home")
    (root / "profiles" / "fresh").mkdir(parents=True)
    found = discover([root.resolve()])
    assert "fresh" in found.by_key()
    assert not found.by_key()["fresh"].db_path.exists()


def test_tombstoned_dot_named_and_invalid_profiles_are_skipped(tmp_path):
    root = make_home(tmp_path / "home", "keep", "gone", ".hidden", "Bad Name", "<script>")
    (root / "profiles" / ".deleted").mkdir()
    (root / "profiles" / ".deleted" / "gone").write_text("deleted")
    found = discover([root.resolve()])
    assert sorted(found.by_key()) == ["default", "keep"]
    reasons = dict((os.path.basename(path), reason) for path, reason in found.ignored)
    assert "tombstoned" in reasons["gone"]
    assert "not a valid" in reasons["Bad Name"]
    assert "not a valid" in reasons["<script>"]
    assert ".hidden" not in reasons  # dot-names are not profiles at all


def test_symlinked_profile_leaving_the_root_is_skipped(tmp_path):
    root = make_home(tmp_path / "home")
    outside = make_home(tmp_path / "elsewhere")
    (root / "profiles").mkdir()
    (root / "profiles" / "escape").symlink_to(outside, target_is_directory=True)
    found = discover([root.resolve()])
    assert "escape" not in found.by_key()
    assert any("outside" in reason for _, reason in found.ignored)


def test_several_roots_get_distinct_keys(tmp_path):
    a = make_home(tmp_path / "alpha", "work")
    b = make_home(tmp_path / "beta", "work")
    found = discover([a.resolve(), b.resolve()])
    keys = sorted(found.by_key())
    assert keys == ["default@alpha", "default@beta", "work@alpha", "work@beta"]
    assert len({p.alias for p in found.profiles}) == 4


def test_missing_root_is_reported_not_fatal(tmp_path):
    found = discover([(tmp_path / "nope").resolve()])
    assert found.profiles == []
    assert "does not exist" in found.ignored[0][1]


@pytest.mark.parametrize("name", ["default", "a" * 65])
def test_names_hermes_would_not_accept_are_not_profiles(tmp_path, name):
    root = make_home(tmp_path / "home", name)
    keys = [p.key for p in discover([root.resolve()]).profiles]
    assert keys == ["default"]


def test_a_folder_that_is_not_a_hermes_home_gives_no_profile(tmp_path):
    from sessions_app.stores.discovery import NOT_A_HOME

    stray = tmp_path / "Downloads"
    stray.mkdir()
    (stray / "holiday.jpg").write_bytes(b"\xff\xd8")
    fresh = tmp_path / "fresh-hermes"
    fresh.mkdir()
    (fresh / "config.yaml").write_text("model: {}\n")  # installed, no store yet
    php = tmp_path / "php"
    (php / "sessions").mkdir(parents=True)
    (php / "sessions" / "sess_8f2k").write_text("x")  # a sessions/ folder that is not Hermes'
    found = discover([stray, fresh, php])
    assert [(p.name, p.root) for p in found.profiles] == [("default", fresh)]
    assert (str(stray), NOT_A_HOME) in found.ignored and (str(php), NOT_A_HOME) in found.ignored


@pytest.mark.parametrize("leftover", ["state.db-wal", "state.db.notadb-20261101-120000-42.bak", ".env",
                                      "sessions/20261101_120000_abcdef.jsonl", "profiles/ops/state.db"])
def test_a_damaged_or_fresh_home_is_still_a_home(tmp_path, leftover):
    """What Hermes leaves when the store itself is gone still marks a home: its
    checks (missing store, JSONL on disk only, quarantined copies) explain it."""
    root = tmp_path / "hermes"
    (root / leftover).parent.mkdir(parents=True, exist_ok=True)
    (root / leftover).write_bytes(b"x")
    found = discover([root])
    assert "default" in [p.name for p in found.profiles] and not found.ignored


def test_a_root_reached_through_a_symlink_is_one_root(tmp_path):
    root = make_home(tmp_path / "hermes", "work")
    (tmp_path / "alias").symlink_to(root, target_is_directory=True)
    roots = configured_roots([str(root), str(tmp_path / "alias"), str(tmp_path / "alias") + "/"])
    assert roots == [root.resolve()]
    found = discover(roots)
    assert [p.key for p in found.profiles] == ["default", "work"] and found.outside == {}


def test_a_store_hard_linked_into_another_root_is_listed_once(tmp_path):
    """Same inode, two real paths: realpath alone would list (and heal) it twice."""
    first = make_home(tmp_path / "a", "work")
    second = make_home(tmp_path / "b", default_db=False)
    os.link(first / "profiles" / "work" / "state.db", second / "state.db")
    found = discover([first, second])
    assert [p.key for p in found.profiles] == ["default@a", "work@a"]
    assert "its state.db is the same file as profile work@a's" in found.outside["default@b"][1]


def test_a_profile_symlinked_to_another_in_the_same_root_is_listed_once(tmp_path):
    root = make_home(tmp_path / "hermes", "work")
    (root / "profiles" / "alias").symlink_to(root / "profiles" / "work", target_is_directory=True)
    found = discover([root])
    assert [p.key for p in found.profiles] == ["default", "work"]
    assert "same file as profile work's" in found.outside["alias"][1]
