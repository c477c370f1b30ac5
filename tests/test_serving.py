"""``scripts/dashboard.sh`` serves with gunicorn (issue 13, point 9): run as a real
process on a free loopback port, it answers the login page and a static file
(WhiteNoise), logs in with the admin it created, sends the security headers, and
throttles logins; ``HERMES_ADMIN_RELOAD=1`` turns gunicorn's reload on."""

import http.cookiejar
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import copy_home

PROJECT = Path(__file__).resolve().parents[1]
PASSWORD = "served admin password 7"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(opener, url, data=None):
    """(status, headers, body) of one request, errors included."""
    try:
        with opener.open(url, data=data, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture
def served(tmp_path):
    """``bash scripts/dashboard.sh`` on a free port; yields (base URL, process, its log path)."""
    port = free_port()
    env = dict(os.environ, PORT=str(port), HERMES_ADMIN_DATA=str(tmp_path / "data"),
               HERMES_ROOTS=str(copy_home(tmp_path / "hermes")), HERMES_ADMIN_PASSWORD=PASSWORD,
               HERMES_ADMIN_LOGIN_FAILURES="2", HERMES_ADMIN_WORKERS="2", HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for name in ("DATABASE_URL", "HERMES_HOME", "HERMES_ADMIN_DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE", "HERMES_ADMIN_RELOAD",
                 "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "scripts/dashboard.sh"], cwd=PROJECT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # pip check, migrate, ensure_admin, then gunicorn's workers
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/login/", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the dashboard did not come up:\n{log.read_text()[-4000:]}")
                time.sleep(0.5)
        yield base, proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def login(opener, base, username, password):
    status, _, html = get(opener, f"{base}/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    data = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token,
                                   "next": ""}).encode()
    request = urllib.request.Request(f"{base}/login/", data=data, headers={"Referer": f"{base}/login/"})
    return get(opener, request)


def test_dashboard_sh_serves_with_gunicorn(served):
    base, proc, log = served
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)

    status, headers, html = get(opener, f"{base}/login/")
    assert status == 200 and "<h1>Log in</h1>" in html
    assert headers["Server"].startswith("gunicorn")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    assert "After 2 failed logins in a row" in html

    css = re.search(r'href="(/static/[^"]+\.css)"', html).group(1)
    status, headers, body = get(opener, base + css)
    assert status == 200 and headers["Content-Type"].startswith("text/css") and ".htmx-indicator" in body
    status, headers, body = get(opener, f"{base}/static/django_htmx/htmx-2.min.js")
    assert status == 200 and "javascript" in headers["Content-Type"]

    status, headers, _ = get(opener, f"{base}/")
    assert status == 302 and headers["Location"].startswith("/login/")
    # The admin ensure_admin created (HERMES_ADMIN_PASSWORD), as before.
    status, headers, _ = login(opener, base, "admin", PASSWORD)
    assert status == 302 and headers["Location"] == "/"
    status, _, html = get(opener, f"{base}/")
    assert status == 200 and html.count('<tr data-profile="') == 6

    # Throttled through the real server: two failures lock this name out from here.
    other = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), NoRedirect)
    assert login(other, base, "admin", "wrong")[0] == 200
    assert login(other, base, "admin", "wrong")[0] == 429
    status, _, html = login(other, base, "admin", PASSWORD)
    assert status == 429 and "Too many failed logins" in html

    text = log.read_text()
    assert "Created the superuser admin" in text and "Booting worker" in text
    assert '"GET /login/ HTTP/1.1" 200' in text  # gunicorn's access log
    assert "runserver" not in text and "development server" not in text.lower()
    # No gunicorn control socket in $HOME (~/.gunicorn/gunicorn.ctl): it is off.
    home = log.parent / "home"  # the server's HOME (the fixture's)
    assert home.is_dir() and not (home / ".gunicorn").exists() and "Control server" not in text


def test_reload_is_a_development_option():
    gunicorn = shutil.which("gunicorn", path=str(PROJECT / ".venv" / "bin")) or "gunicorn"
    env = dict(os.environ)
    env.pop("HERMES_ADMIN_RELOAD", None)
    plain = subprocess.run([gunicorn, "--print-config"], cwd=PROJECT, env=env, capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert re.search(r"^reload\s+= False$", plain.stdout, re.M)
    assert re.search(r"^wsgi_app\s+= hermes_admin.wsgi:application$", plain.stdout, re.M)
    assert re.search(r"^control_socket_disable\s+= True$", plain.stdout, re.M)
    reloading = subprocess.run([gunicorn, "--print-config"], cwd=PROJECT, env=dict(env, HERMES_ADMIN_RELOAD="1"),
                               capture_output=True, text=True, timeout=60)
    assert re.search(r"^reload\s+= True$", reloading.stdout, re.M)
    extra = re.search(r"^reload_extra_files\s+= (.*)$", reloading.stdout, re.M).group(1)
    assert "templates/_base.html" in extra and "static/app.css" in extra
