"""Where notifications go: webhooks (``requests``) and e-mail (Django's mail settings).

Both retry with exponential backoff, bounded by a :class:`Budget`: every attempt's
timeout and every wait come out of the seconds the run still has for its
notifications (``HERMES_NOTIFY_BUDGET``), so an unreachable endpoint delays the
end of a run by that much at most and never fails it. Webhook URLs carry their
secret in the path (Slack, Mattermost): only the scheme and host are ever written
into an audit event or a log line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import get_connection, send_mail

log = logging.getLogger("sessions_app.notify")
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
FORMATS = ("slack", "generic")


class Budget:
    """Seconds left for the notifications of one run (monotonic clock)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + max(0.0, seconds)

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


@dataclass
class Delivery:
    """One channel's result: ``channel`` (``webhook <host>`` | ``email``), ``ok``,
    ``attempts`` made, ``detail`` (HTTP status or error class and text)."""

    channel: str
    ok: bool
    attempts: int
    detail: str

    def as_json(self) -> dict:
        return {"channel": self.channel, "ok": self.ok, "attempts": self.attempts, "detail": self.detail}

    def line(self) -> str:
        return (f"{self.channel}: {'delivered' if self.ok else 'not delivered'} ({self.detail}, "
                f"{self.attempts} attempt{'' if self.attempts == 1 else 's'})")


def webhook_urls() -> list[str]:
    return list(getattr(settings, "HERMES_NOTIFY_WEBHOOK_URLS", []) or [])


def email_recipients() -> list[str]:
    return list(getattr(settings, "HERMES_NOTIFY_EMAIL_TO", []) or [])


def configured() -> bool:
    """Whether any channel is set up (nothing is computed or recorded otherwise)."""
    return bool(webhook_urls() or email_recipients())


def redact(url: str) -> str:
    """``https://hooks.example.org`` for ``https://hooks.example.org/services/T0/B0/secret``."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or '?'}" + (f":{parts.port}" if parts.port else "")
    except ValueError:  # a port that is not a number
        return "(malformed URL)"


def _attempts() -> int:
    return max(1, int(getattr(settings, "HERMES_NOTIFY_ATTEMPTS", 3)))


def _timeout() -> float:
    return float(getattr(settings, "HERMES_NOTIFY_TIMEOUT", 3.0))


def _retry(send, budget: Budget) -> tuple[bool, int, str]:
    """Call ``send(timeout) -> (ok, retryable, detail)`` until it succeeds, says not to
    retry, the attempts run out or the budget does; waits ``BACKOFF * 2**n`` between."""
    backoff = float(getattr(settings, "HERMES_NOTIFY_BACKOFF", 0.5))
    attempts, ok, detail = 0, False, "not attempted: the notification budget of this run is used up"
    for n in range(_attempts()):
        timeout = min(_timeout(), budget.remaining())
        if timeout < 0.05:
            break
        attempts += 1
        ok, retryable, detail = send(timeout)
        if ok or not retryable:
            break
        wait = backoff * (2 ** n)
        if n + 1 >= _attempts() or budget.remaining() < wait + 0.05:
            break
        time.sleep(wait)
    return ok, attempts, detail


def webhook_body(event) -> dict:
    """``{"text": …}`` (Slack and Mattermost incoming webhooks) or the generic shape
    (``Event.as_json``: the same ``text`` plus the event's fields)."""
    fmt = getattr(settings, "HERMES_NOTIFY_WEBHOOK_FORMAT", "slack")
    return event.as_json() if fmt == "generic" else {"text": event.text()}


def post_webhook(url: str, event, budget: Budget) -> Delivery:
    body = webhook_body(event)

    import requests  # late: ~0.1 s of every server start (requests, urllib3) for a rare webhook

    def send(timeout: float):
        try:
            response = requests.post(url, json=body, timeout=timeout, allow_redirects=False,
                                     headers={"User-Agent": "hermes-admin"})
        except requests.RequestException as exc:
            return False, True, f"{exc.__class__.__name__}"
        if 200 <= response.status_code < 300:
            return True, False, f"HTTP {response.status_code}"
        return False, response.status_code in RETRY_STATUS, f"HTTP {response.status_code}"

    ok, attempts, detail = _retry(send, budget)
    return Delivery(f"webhook {redact(url)}", ok, attempts, detail)


def send_email(event, budget: Budget) -> Delivery:
    recipients = email_recipients()
    subject = f"[hermes-admin] {event.summary}"[:200]

    def send(timeout: float):
        try:
            connection = get_connection(timeout=timeout)
            send_mail(subject, event.text() + "\n", settings.DEFAULT_FROM_EMAIL, recipients,
                      connection=connection)
        except Exception as exc:  # SMTP, socket and configuration errors alike: recorded, never raised
            return False, True, f"{exc.__class__.__name__}: {exc}"[:200]
        return True, False, f"sent to {len(recipients)} recipient{'' if len(recipients) == 1 else 's'}"

    ok, attempts, detail = _retry(send, budget)
    return Delivery("email", ok, attempts, detail)


def deliver(event, budget: Budget) -> list[Delivery]:
    """Send ``event`` on every configured channel; never raises."""
    out = []
    for url in webhook_urls():
        try:
            out.append(post_webhook(url, event, budget))
        except Exception as exc:  # a malformed URL: recorded like any failure
            out.append(Delivery(f"webhook {redact(url)}", False, 0, f"{exc.__class__.__name__}"))
    if email_recipients():
        out.append(send_email(event, budget))
    for d in out:
        if not d.ok:
            log.warning("notification %s: %s", event.kind, d.line())
    return out
