"""Browsing connections are read-only and pass values through untouched (rules 1, 7, 8)."""

import sqlite3

import pytest
from django.db import DatabaseError, connections

from sessions_app.models import (
    AgentMessage, AgentSession, CompressionLock, GatewayRouting, SchemaVersion, SessionModelUsage,
    SessionTurnLease, StateMeta, SystemPrompt,
)
from sessions_app.stores import registry
from tests.conftest import MANIFEST, PROFILES, ids

pytestmark = pytest.mark.django_db


def store_of(key):
    store = registry.get(key)
    assert store is not None
    return store


@pytest.mark.parametrize("profile", PROFILES)
def test_browsing_alias_cannot_write(hermes_home, profile):
    store = store_of(profile)
    before = (store.path).read_bytes()
    with pytest.raises(DatabaseError, match="readonly|read-only|query_only|attempt to write"):
        with connections[store.alias].cursor() as cursor:
            cursor.execute("UPDATE sessions SET title = 'x'")
    with pytest.raises(DatabaseError):
        AgentSession.objects.for_store(store).filter(pk=ids(profile)["cli_main"]).update(title="x")
    assert store.path.read_bytes() == before


def test_alias_settings_are_read_only_and_never_migrated(hermes_home):
    store = store_of("default")
    conf = connections.settings[store.alias]
    assert conf["NAME"].startswith("file:") and conf["NAME"].endswith("?mode=ro")
    assert conf["OPTIONS"]["detect_types"] == 0
    assert "query_only" in conf["OPTIONS"]["init_command"]
    assert conf["CONN_MAX_AGE"] == 0
    from django.db import router
    assert router.allow_migrate(store.alias, "sessions_app") is False
    assert router.allow_migrate(store.alias, "auth") is False


@pytest.mark.parametrize("profile", PROFILES)
def test_epoch_floats_arrive_intact(hermes_home, profile):
    store = store_of(profile)
    rows = list(AgentSession.objects.for_store(store).values_list("id", "started_at"))
    assert len(rows) == len(MANIFEST["profiles"][profile]["sessions_by_id"])
    assert all(isinstance(started, float) and started > 1e9 for _, started in rows)
    stamps = AgentMessage.objects.for_store(store).values_list("timestamp", flat=True)
    assert all(isinstance(t, float) for t in stamps)


def test_a_column_declared_timestamp_is_not_turned_into_none(hermes_home):
    """Django's converters would read epoch floats in a ``timestamp`` column as None."""
    db = hermes_home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE probe_times (at timestamp)")
    conn.execute("INSERT INTO probe_times VALUES (1700000000.5)")
    conn.commit()
    conn.close()
    store = store_of("default")
    with connections[store.alias].cursor() as cursor:
        cursor.execute("SELECT at FROM probe_times")
        assert cursor.fetchone()[0] == 1700000000.5


@pytest.mark.parametrize("profile", PROFILES)
def test_every_model_is_usable_on_every_store_that_has_its_table(hermes_home, profile):
    store = store_of(profile)
    tables = set(MANIFEST["profiles"][profile]["tables"])
    models = [AgentSession, AgentMessage, SessionModelUsage, CompressionLock, SessionTurnLease,
              GatewayRouting, StateMeta, SystemPrompt, SchemaVersion]
    for model in models:
        table = model._meta.db_table
        if table in tables:
            list(model.objects.for_store(store)[:5])
        else:
            with pytest.raises(LookupError):
                model.objects.for_store(store)
    version = SchemaVersion.objects.for_store(store).get().version
    assert version == MANIFEST["profiles"][profile]["schema_version"]


def test_store_models_refuse_the_default_database(hermes_home):
    from django.core.exceptions import ImproperlyConfigured
    with pytest.raises(ImproperlyConfigured, match="using"):
        list(AgentSession.objects.all()[:1])


def test_capabilities_follow_the_columns_not_the_version(hermes_home):
    archive, edge = store_of("archive"), store_of("edge")
    with archive.read() as conn:
        old = archive.capabilities(conn)
    with edge.read() as conn:
        new = edge.capabilities(conn)
    assert not old.has("messages", "active") and new.has("messages", "active")
    assert not old.has_table("session_turn_leases") and new.has_table("session_turn_leases")
    assert old.missing_required() == [] == new.missing_required()
