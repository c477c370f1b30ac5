"""Unmanaged mirrors of Hermes store tables (docs/store.md §3.3), plus nothing else yet.

Every model here is ``managed = False`` and lives in a Hermes store, not in the
dashboard's database: query with ``Model.objects.for_store(store)`` (or
``.using(store.alias)``). The fields are the newest known shape (schema 30+ with the
2.9 deltas); older stores lack some columns, so ``for_store`` defers every field the
store does not have (ground rule 8). Foreign keys carry ``db_constraint=False`` and
``DO_NOTHING`` (ground rule 7): Hermes declares no cascades on these edges, and the
dashboard never lets Django cascade anything in a store.
"""

from django.db import models

from .vocabulary import WRITE_OUTCOMES


class StoreQuerySet(models.QuerySet):
    def for_store(self, store, caps=None):
        """Rows of this table in ``store``, selecting only columns the store has.

        ``caps`` (``stores.schema.Capabilities``) may be passed when already read;
        otherwise it is read once through a short read-only connection.
        Raises ``LookupError`` when the store has no such table.
        """
        if caps is None:
            with store.read() as conn:
                caps = store.capabilities(conn)
        table = self.model._meta.db_table
        if not caps.has_table(table):
            raise LookupError(f"store {store.key} has no table {table}")
        present = set(caps.columns(table))
        fields = [f.name for f in self.model._meta.concrete_fields if f.column in present and not f.primary_key]
        qs = self.using(store.alias)
        return qs.only(*fields) if fields else qs


StoreManager = models.Manager.from_queryset(StoreQuerySet)


class StoreModel(models.Model):
    objects = StoreManager()

    class Meta:
        abstract = True
        managed = False
        default_permissions = ()


class AgentSession(StoreModel):
    """A row of ``sessions``: one Hermes session (one segment of a conversation)."""

    id = models.TextField(primary_key=True)
    source = models.TextField(null=True)
    created_source = models.TextField(null=True)
    user_id = models.TextField(null=True)
    session_key = models.TextField(null=True)
    chat_id = models.TextField(null=True)
    chat_type = models.TextField(null=True)
    thread_id = models.TextField(null=True)
    display_name = models.TextField(null=True)
    origin_json = models.TextField(null=True)
    expiry_finalized = models.IntegerField(null=True)
    model = models.TextField(null=True)
    model_config = models.TextField(null=True)
    system_prompt = models.TextField(null=True)
    system_prompt_hash = models.TextField(null=True)
    parent_session = models.ForeignKey("self", null=True, db_column="parent_session_id", db_constraint=False, on_delete=models.DO_NOTHING, related_name="children")
    started_at = models.FloatField(null=True)
    ended_at = models.FloatField(null=True)
    end_reason = models.TextField(null=True)
    message_count = models.IntegerField(null=True)
    tool_call_count = models.IntegerField(null=True)
    input_tokens = models.IntegerField(null=True)
    output_tokens = models.IntegerField(null=True)
    cache_read_tokens = models.IntegerField(null=True)
    cache_write_tokens = models.IntegerField(null=True)
    reasoning_tokens = models.IntegerField(null=True)
    cwd = models.TextField(null=True)
    git_branch = models.TextField(null=True)
    git_repo_root = models.TextField(null=True)
    git_metadata_generation = models.IntegerField(null=True)
    billing_provider = models.TextField(null=True)
    billing_base_url = models.TextField(null=True)
    billing_mode = models.TextField(null=True)
    estimated_cost_usd = models.FloatField(null=True)
    actual_cost_usd = models.FloatField(null=True)
    cost_status = models.TextField(null=True)
    cost_source = models.TextField(null=True)
    pricing_version = models.TextField(null=True)
    title = models.TextField(null=True)
    title_source = models.TextField(null=True)
    last_activity_at = models.FloatField(null=True)
    last_activity_description = models.TextField(null=True)
    last_activity_provenance = models.TextField(null=True)
    api_call_count = models.IntegerField(null=True)
    handoff_state = models.TextField(null=True)
    handoff_platform = models.TextField(null=True)
    handoff_error = models.TextField(null=True)
    compression_failure_cooldown_until = models.FloatField(null=True)
    compression_failure_error = models.TextField(null=True)
    compression_fallback_streak = models.IntegerField(null=True)
    compression_ineffective_count = models.IntegerField(null=True)
    compression_recovery_deadline = models.FloatField(null=True)
    compression_overload_streak = models.IntegerField(null=True)
    profile_name = models.TextField(null=True)
    transport_profile = models.TextField(null=True)
    rewind_count = models.IntegerField(null=True)
    archived = models.IntegerField(null=True)
    pinned = models.IntegerField(null=True)
    hidden = models.IntegerField(null=True)
    last_read_at = models.FloatField(null=True)
    tool_names = models.TextField(null=True)
    auto_archived = models.IntegerField(null=True)

    class Meta(StoreModel.Meta):
        db_table = "sessions"


class AgentMessage(StoreModel):
    """A row of ``messages``; ordered by ``id`` (ground rule 10), never by timestamp."""

    id = models.IntegerField(primary_key=True)
    session = models.ForeignKey(AgentSession, db_column="session_id", db_constraint=False, on_delete=models.DO_NOTHING, related_name="messages")
    role = models.TextField(null=True)
    content = models.TextField(null=True)
    tool_call_id = models.TextField(null=True)
    tool_calls = models.TextField(null=True)
    tool_name = models.TextField(null=True)
    effect_disposition = models.TextField(null=True)
    timestamp = models.FloatField(null=True)
    token_count = models.IntegerField(null=True)
    finish_reason = models.TextField(null=True)
    reasoning = models.TextField(null=True)
    reasoning_content = models.TextField(null=True)
    reasoning_details = models.TextField(null=True)
    codex_reasoning_items = models.TextField(null=True)
    codex_message_items = models.TextField(null=True)
    platform_message_id = models.TextField(null=True)
    observed = models.IntegerField(null=True)
    compressed_summary = models.IntegerField(null=True, db_column="_compressed_summary")
    active = models.IntegerField(null=True)
    compacted = models.IntegerField(null=True)
    api_content = models.TextField(null=True)
    display_kind = models.TextField(null=True)
    display_metadata = models.TextField(null=True)
    display_identity = models.BinaryField(null=True)
    display_order = models.IntegerField(null=True)
    message_uid = models.TextField(null=True)
    absorbed_message_uids = models.TextField(null=True)
    tool_call_uids = models.TextField(null=True)
    tool_call_uid = models.TextField(null=True)

    class Meta(StoreModel.Meta):
        db_table = "messages"
        ordering = ["id"]


class SessionModelUsage(StoreModel):
    """Per-model/per-task accounting (``session_model_usage``, schema 20+)."""

    pk = models.CompositePrimaryKey("session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task")
    session_id = models.TextField()
    model = models.TextField()
    billing_provider = models.TextField()
    billing_base_url = models.TextField()
    billing_mode = models.TextField()
    task = models.TextField()
    api_call_count = models.IntegerField(null=True)
    input_tokens = models.IntegerField(null=True)
    output_tokens = models.IntegerField(null=True)
    cache_read_tokens = models.IntegerField(null=True)
    cache_write_tokens = models.IntegerField(null=True)
    reasoning_tokens = models.IntegerField(null=True)
    estimated_cost_usd = models.FloatField(null=True)
    actual_cost_usd = models.FloatField(null=True)
    cost_status = models.TextField(null=True)
    cost_source = models.TextField(null=True)
    first_seen = models.FloatField(null=True)
    last_seen = models.FloatField(null=True)

    class Meta(StoreModel.Meta):
        db_table = "session_model_usage"


class CompressionLock(StoreModel):
    """A compression lock (docs/store.md §7.2); ``expires_at`` is epoch seconds."""

    session_id = models.TextField(primary_key=True)
    holder = models.TextField()
    acquired_at = models.FloatField()
    expires_at = models.FloatField()

    class Meta(StoreModel.Meta):
        db_table = "compression_locks"


class SessionTurnLease(StoreModel):
    """A turn lease (docs/store.md §7.1), keyed on the compression-lineage root id."""

    conversation_id = models.TextField(primary_key=True)
    holder = models.TextField()
    acquired_at = models.FloatField()
    expires_at = models.FloatField()

    class Meta(StoreModel.Meta):
        db_table = "session_turn_leases"


class GatewayRouting(StoreModel):
    """The gateway routing index; ``entry_json`` is a serialized SessionEntry."""

    pk = models.CompositePrimaryKey("scope", "session_key")
    scope = models.TextField()
    session_key = models.TextField()
    entry_json = models.TextField()
    updated_at = models.FloatField()

    class Meta(StoreModel.Meta):
        db_table = "gateway_routing"


class GatewayHeartbeat(StoreModel):
    """One serve/tui_gateway backend's heartbeat (docs/store.md §7.6)."""

    backend_id = models.TextField(primary_key=True)
    pid = models.IntegerField()
    started_at = models.FloatField()
    last_heartbeat = models.FloatField()
    profile = models.TextField(null=True)
    host = models.TextField(null=True)

    class Meta(StoreModel.Meta):
        db_table = "gateway_heartbeats"


class StateMeta(StoreModel):
    """Key/value bookkeeping (docs/store.md §4.3)."""

    key = models.TextField(primary_key=True)
    value = models.TextField(null=True)

    class Meta(StoreModel.Meta):
        db_table = "state_meta"


class SystemPrompt(StoreModel):
    """Content-addressed system prompts (``hash`` = sha256 hex of ``prompt``)."""

    hash = models.TextField(primary_key=True)
    prompt = models.TextField()

    class Meta(StoreModel.Meta):
        db_table = "system_prompts"


class SchemaVersion(StoreModel):
    """The single-row ``schema_version`` table (it has no primary key upstream)."""

    version = models.IntegerField(primary_key=True)

    class Meta(StoreModel.Meta):
        db_table = "schema_version"


# ---------------------------------------------------------------------------
# The dashboard's own tables (default database, managed, migrated).


class HealRun(models.Model):
    """One check or heal pass over one or more stores, from the browser or a command.

    ``report`` holds the JSON document ``heal_sessions --json`` prints (``runs.REPORT_VERSION``);
    ``done``/``total`` count stores for progress; ``log_tail`` the last lines of
    progress text shown while the run is going.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    mode = models.CharField(max_length=10)  # "check" | "apply"
    trigger = models.CharField(max_length=20)  # "browser" | "command"
    # Browser repairs of single findings: the previewed plans to apply, as dicts
    # (``engine.plan_from_dict``). Empty for whole-profile runs.
    plans = models.JSONField(default=list)
    actor = models.ForeignKey("auth.User", null=True, on_delete=models.SET_NULL, related_name="+")
    actor_label = models.CharField(max_length=200)
    profiles = models.JSONField(default=list)  # profile keys asked for
    only = models.JSONField(default=list)  # check codes, empty = all
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    total = models.IntegerField(default=0)
    done = models.IntegerField(default=0)
    log_tail = models.TextField(default="")
    report = models.JSONField(null=True)
    # Profile keys a whole pass read and checked (report status "ok"), written with its
    # finding counts (runs.record_snapshot): the health chart asks which passes covered
    # a profile without decoding reports (10 MB each on a million-message home).
    checked_profiles = models.JSONField(default=list)
    error = models.TextField(default="")
    pid = models.IntegerField(null=True)
    request_address = models.GenericIPAddressField(null=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.mode} run #{self.pk} ({self.status})"


class AuditEvent(models.Model):
    """One applied, skipped, refused or failed action, whoever asked for it.

    Written by the actions themselves (never by signals), so raw-SQL repairs and
    cron runs are covered alike. ``changes`` lists the rows changed as
    ``{"table", "key", "column", "before", "after"}`` (or ``"op"`` for inserts,
    moves and file operations); ``backup_*`` describe the store copy taken before
    the first write of the run (size in bytes, sha256 hex).
    """

    # The outcome words are defined once, with what each means (``vocabulary.OUTCOMES``).
    Outcome = models.TextChoices("Outcome", [(word.upper(), word) for word in WRITE_OUTCOMES])

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey("auth.User", null=True, on_delete=models.SET_NULL, related_name="+")
    actor_label = models.CharField(max_length=200)
    action = models.CharField(max_length=64, db_index=True)
    check_code = models.CharField(max_length=64, blank=True)
    profile = models.CharField(max_length=200, db_index=True)
    store_path = models.TextField()
    session_ids = models.JSONField(default=list)
    plan = models.JSONField(default=dict)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, db_index=True)
    reason = models.TextField(blank=True)
    changes = models.JSONField(default=list)
    rows_changed = models.IntegerField(default=0)
    backup_path = models.TextField(blank=True)
    backup_size = models.BigIntegerField(null=True)
    backup_sha256 = models.CharField(max_length=64, blank=True)
    duration_ms = models.IntegerField(default=0)
    request_address = models.GenericIPAddressField(null=True)
    run = models.ForeignKey(HealRun, null=True, on_delete=models.SET_NULL, related_name="events")

    class Meta:
        ordering = ["-created_at", "-id"]
        # The dashboard's roles (issue 6) are groups holding these permissions;
        # see the ``roles`` migration. Auditors: view_dashboard (+ the view_*
        # permissions of runs and events); operators add view_transcripts,
        # run_heal and change_flags; admins add delete_sessions and override_live.
        permissions = [
            ("view_dashboard", "Can browse profiles, sessions metadata, health and history"),
            ("view_transcripts", "Can read transcript content and export it"),
            ("run_heal", "Can run checks, repairs and transcript migrations"),
            ("delete_sessions", "Can delete, restore and move sessions"),
            ("override_live", "Can override a maybe-live verdict when every holder is provably dead"),
            ("change_flags", "Can rename, archive, pin and hide sessions"),
        ]

    def __str__(self):
        return f"{self.action} {self.outcome} on {self.profile}"


class FindingSnapshot(models.Model):
    """Finding counts per profile and check code at the end of one check pass."""

    taken_at = models.DateTimeField(auto_now_add=True, db_index=True)
    run = models.ForeignKey(HealRun, null=True, on_delete=models.CASCADE, related_name="snapshots")
    profile = models.CharField(max_length=200, db_index=True)
    check_code = models.CharField(max_length=64)
    severity = models.CharField(max_length=10)
    count = models.IntegerField()


# Fleet mode (issue 17): the hosts' heartbeats, in sessions_app/fleet/models.py.
from .fleet.models import FleetHost  # noqa: E402,F401
