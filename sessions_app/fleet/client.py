"""The dashboard's side of the fleet: which hosts are there, and asking them.

Hosts come from their heartbeats (``FleetHost`` rows); a host whose latest beat
is older than ``HERMES_FLEET_UNREACHABLE`` seconds, or that shut down, is
*unreachable*: its last announced profiles are shown as such and no task is sent
to it (so a dead host costs a page nothing). Reads are ``hermes.read`` tasks on
the host's queue with a timeout (``HERMES_FLEET_TIMEOUT`` seconds, also the
message's expiry); several hosts are asked at once and each answer is waited for
until one shared deadline, so a slow host costs at most the timeout and says so,
and never delays pages that do not need it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from ..timefmt import human_duration
from . import queue, split_key


@dataclass
class HostView:
    """One host as the dashboard sees it: its row plus ``reachable`` and ``age``
    (seconds since the latest heartbeat)."""

    row: object
    reachable: bool
    age: float
    why: str = ""

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def profiles(self) -> list[dict]:
        return self.row.profiles


@dataclass
class Answer:
    """A host's answer: ``ok`` with ``data``, or ``error`` (unreachable, timed out,
    refused, failed) in words for the page."""

    host: str
    ok: bool
    data: object = None
    error: str = ""
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def enabled() -> bool:
    """Whether fleet mode is on (a broker is configured)."""
    return bool(getattr(settings, "FLEET", False))


def celery_app():
    from hermes_admin.celery import app

    return app


_rows_cache: tuple[float, list] = (float("-inf"), [])


def _rows() -> list:
    """The ``FleetHost`` rows, read at most once per ``HERMES_FLEET_HOSTS_TTL`` seconds
    per process: heartbeats come every ``HERMES_FLEET_HEARTBEAT`` seconds, so a
    fresher read tells nothing new, and each page saves a database round trip
    (docs/benchmarks.md, "Fleet: a remote profile's pages against a local one's
    (issue 17)"). Reachability is judged on every call."""
    global _rows_cache
    from .models import FleetHost

    ttl = float(getattr(settings, "HERMES_FLEET_HOSTS_TTL", 0))
    read_at, rows = _rows_cache
    if ttl <= 0 or time.monotonic() - read_at > ttl:
        rows = list(FleetHost.objects.all())
        _rows_cache = (time.monotonic(), rows)
    return rows


def hosts() -> list[HostView]:
    """Every host that ever announced itself, by name, with its reachability."""
    now = timezone.now()
    window = float(settings.HERMES_FLEET_UNREACHABLE)
    out = []
    for row in _rows():
        age = (now - row.last_seen).total_seconds()
        if row.stopped_at is not None and row.stopped_at >= row.last_seen:
            out.append(HostView(row, False, age, f"its worker stopped at {row.stopped_at:%Y-%m-%d %H:%M:%S} UTC"))
        elif age > window:
            out.append(HostView(row, False, age, f"no heartbeat for {human_duration(age)} (window {human_duration(window)})"))
        else:
            out.append(HostView(row, True, age))
    return out


def host(name: str) -> HostView | None:
    return next((h for h in hosts() if h.name == name), None)


def host_of(key: str) -> HostView | None:
    """The host a fleet profile key names, or None (not a fleet key, unknown host)."""
    parts = split_key(key)
    return host(parts[1]) if parts else None


def send(host_name: str, op: str, kwargs: dict, timeout: float):
    return celery_app().send_task("hermes.read", args=[op, kwargs], queue=queue(host_name),
                                  expires=timeout, ignore_result=False)


def collect(pending, timeout: float) -> list[Answer]:
    """Wait for ``pending`` ``(host, AsyncResult or Answer)`` pairs until one shared
    deadline ``timeout`` seconds from now; one :class:`Answer` each, in order."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    started = time.monotonic()
    deadline = started + timeout
    answers = []
    for name, result in pending:
        if isinstance(result, Answer):
            answers.append(result)
            continue
        try:
            value = result.get(timeout=max(0.01, deadline - time.monotonic()), propagate=False)
        except CeleryTimeout:
            answers.append(Answer(name, False, error=f"host {name} did not answer within {timeout:g} s",
                                  seconds=time.monotonic() - started))
            continue
        except Exception as exc:  # the result backend away
            answers.append(Answer(name, False, error=f"no answer from host {name}: {exc.__class__.__name__}: {exc}"))
            continue
        spent = time.monotonic() - started
        # No result.forget(): two more Redis round trips per read, each a chance to lose
        # the CPU on a busy machine; read results expire by CELERY_RESULT_EXPIRES instead.
        if result.failed() or not isinstance(value, dict):
            answers.append(Answer(name, False, error=f"host {name} failed to answer: {value!r}"[:500], seconds=spent))
        elif not value.get("ok"):
            answers.append(Answer(name, False, error=f"host {name} refused: {value.get('refused')}", seconds=spent))
        else:
            answers.append(Answer(name, True, data=value.get("data"), seconds=spent))
    return answers


def ask_many(calls: list[tuple[str, str, dict]], timeout: float | None = None,
             views: list[HostView] | None = None) -> list[Answer]:
    """``(host, op, kwargs)`` reads sent at once; answers in the same order. An
    unreachable host is answered here without a task. ``views``: the hosts as the
    page already read them (:func:`hosts`), so a page reads the table once."""
    timeout = float(settings.HERMES_FLEET_TIMEOUT if timeout is None else timeout)
    known = {h.name: h for h in (hosts() if views is None else views)}
    pending = []
    for name, op, kwargs in calls:
        view = known.get(name)
        if view is None:
            pending.append((name, Answer(name, False, error=f"host {name} is not part of the fleet")))
        elif not view.reachable:
            pending.append((name, Answer(name, False, error=f"host {name} is unreachable: {view.why}")))
        else:
            try:
                pending.append((name, send(name, op, kwargs, timeout)))
            except Exception as exc:  # the broker away: every host is, for now
                pending.append((name, Answer(name, False, error=f"the broker cannot be reached: {exc}")))
    return collect(pending, timeout)


def ask(host: str | HostView, op: str, timeout: float | None = None, **kwargs) -> Answer:
    """One read from one host, named or as a :class:`HostView` the page already has
    (see :func:`ask_many`)."""
    if isinstance(host, HostView):
        return ask_many([(host.name, op, kwargs)], timeout, views=[host])[0]
    return ask_many([(host, op, kwargs)], timeout)[0]


def start_run(run, host_name: str):
    """Send fleet run ``run`` (a ``HealRun`` with trigger ``fleet``) to its host's queue."""
    return celery_app().send_task("hermes.run_job", args=[run.pk], queue=queue(host_name), ignore_result=True)
