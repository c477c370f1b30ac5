"""``GET /metrics``: the Prometheus scrape, behind a bearer token instead of the login.

The token is ``HERMES_ADMIN_METRICS_TOKEN`` (settings ``HERMES_METRICS_TOKEN``).
Unset, the endpoint does not exist (404, and the body says how to turn it on); set,
a request without ``Authorization: Bearer <token>`` gets 401 with a
``WWW-Authenticate`` challenge, one with another token 403. The comparison takes
the same time whatever the token (``hmac.compare_digest``).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET



def _plain(status: int, text: str, **headers) -> HttpResponse:
    response = HttpResponse(text + "\n", status=status, content_type="text/plain; charset=utf-8")
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


@login_not_required  # a scraper has no login; the bearer token guards it
@never_cache
@require_GET
def metrics_view(request):
    token = getattr(settings, "HERMES_METRICS_TOKEN", "") or ""
    if not token:
        return _plain(404, "metrics are off: set HERMES_ADMIN_METRICS_TOKEN to a secret and scrape with "
                           "'Authorization: Bearer <that secret>'")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return _plain(401, "a bearer token is required", WWW_Authenticate='Bearer realm="hermes-admin metrics"')
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return _plain(403, "wrong token", WWW_Authenticate='Bearer realm="hermes-admin metrics", error="invalid_token"')
    from .. import metrics  # late: prometheus_client is imported by the first scrape, not every start

    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)
