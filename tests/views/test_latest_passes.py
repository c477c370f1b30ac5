"""``health.latest`` reads the finished whole passes through a statement compiled once
per database (``health._whole_passes``): the runs it picks, their times (aware, as the
ORM gives them) and the newest-first choice per profile are the ORM queryset's."""

import datetime as dt

import pytest
from django.utils import timezone

from sessions_app import health
from sessions_app.models import HealRun

pytestmark = pytest.mark.django_db


def run(profiles, minutes_ago, **kwargs):
    when = timezone.now() - dt.timedelta(minutes=minutes_ago)
    fields = {"mode": "check", "trigger": "command", "actor_label": "cron", "status": "done", "finished_at": when,
              "started_at": when - dt.timedelta(seconds=30),
              "report": {"profiles": [{"profile": p, "status": "ok", "findings": []} for p in profiles]}}
    fields.update(kwargs)
    return HealRun.objects.create(**fields)


def test_latest_picks_the_newest_whole_pass_per_profile():
    old = run(["default", "ops"], 60)
    new = run(["default"], 10)
    run(["ops"], 5, only=["counter_drift"])  # partial: not a profile's health
    run(["ops"], 4, plans=[{"x": 1}])
    run(["ops"], 3, status="running", finished_at=None)
    run(["ops"], 2, mode="plan")
    found = health.latest(["default", "ops", "nowhere"])
    assert found["default"].run.pk == new.pk and found["ops"].run.pk == old.pk
    assert found["nowhere"].run is None
    assert found["default"].run.finished_at == HealRun.objects.get(pk=new.pk).finished_at
    assert found["default"].run.finished_at.tzinfo is not None
    assert found["default"].run.mode == "check" and health.read_at(found["default"].run) == new.started_at.timestamp()
    orm = (HealRun.objects.filter(status=HealRun.Status.DONE, plans=[], only=[], mode__in=("check", "apply"))
           .exclude(report=None).order_by("-finished_at"))
    assert [r.pk for r in health._whole_passes()] == [r.pk for r in orm]
