"""The Content-Security-Policy in real Chromium: every main page loads and htmx
still works (a filter swapping the sessions table, a run page polling itself to
its result) with not one violation reported, and the policy really blocks what it
should (an injected inline script neither runs nor goes unreported)."""

import pytest

from tests.conftest import IDS, ids

pytestmark = pytest.mark.e2e
SID = IDS["cli_main"]
# Registered before any page script (DevTools init scripts are not subject to the policy).
WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(
    `${e.violatedDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile}:${e.lineNumber}`));
"""
PAGES = ["/", "/sessions/", "/sessions/?profile=ops&order=activity", "/p/default/", f"/p/default/s/{SID}/",
         f"/p/default/s/{IDS['hostile']}/", "/p/default/health/", "/p/default/history/", "/p/default/migrate/",
         "/p/default/search/?q=checkout", f"/p/default/s/{SID}/delete/", "/runs/", "/audit/", "/trash/",
         "/prune/?older_than=0", "/p/edge/prune/", f"/p/edge/s/{ids('edge')['cli_main']}/",
         "/usage/?date_from=&date_to=", "/search/?q=tokenizer", "/p/edge/search/scan/?q=tokenizer"]


@pytest.fixture
def watched(logged_in):
    page = logged_in
    console = []
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda exc: console.append(("pageerror", str(exc))))
    page.add_init_script(WATCH)
    return page, console


def problems(page, console) -> list[str]:
    """Violations the page reported, and console errors (CSP refusals are logged as errors)."""
    return page.evaluate("window.__csp") + [f"{kind}: {text}" for kind, text in console if kind in ("error", "pageerror")]


def test_every_main_page_loads_under_the_policy(watched, live_server, hermes_home):
    page, console = watched
    for url in PAGES:
        response = page.goto(live_server.url + url)
        assert response.status == 200, url
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy and "unsafe" not in policy
        page.wait_for_load_state("networkidle")
        assert page.evaluate("typeof htmx") == "object", url  # htmx loaded from this origin
        assert problems(page, console) == [], url
    # The styles applied: app.css came through (its body font is not the browser default).
    assert "system-ui" in page.evaluate("getComputedStyle(document.body).fontFamily")
    # Logged out: the login page, a failed login and a 404 page.
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    page.wait_for_selector("p.error")
    assert problems(page, console) == []
    page.goto(f"{live_server.url}/login/")  # logged in again
    page.fill("#id_username", "alice")
    page.fill("#id_password", "correct horse battery")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert problems(page, console) == []
    assert page.goto(f"{live_server.url}/p/no-such-profile/").status == 404
    assert page.locator("h1").count() == 1
    # (Chromium logs the 404 status itself as a console error: only the policy counts here.)
    assert [p for p in problems(page, console) if "404 (Not Found)" not in p] == []


def test_htmx_swaps_and_polls_under_the_policy(watched, live_server, hermes_home, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    page, console = watched
    page.goto(f"{live_server.url}/sessions/")
    with page.expect_request("**/sessions/?*profile=ops*") as request:
        page.select_option("select[name=profile]", "ops")
    assert request.value.headers.get("hx-request") == "true"  # an htmx request, not a page load
    page.wait_for_url("**profile=ops**")
    assert page.locator("table.sessions tbody tr").count() == 15
    assert problems(page, console) == []

    page.goto(f"{live_server.url}/")
    page.click("button:has-text('Check all profiles')")
    page.wait_for_url("**/runs/*/")
    page.wait_for_selector(".run-state.run-done", timeout=60_000)  # reached by htmx polling
    assert problems(page, console) == []


def test_the_policy_blocks_and_reports_an_injected_inline_script(watched, live_server, hermes_home):
    page, console = watched
    page.goto(f"{live_server.url}/")
    page.evaluate("""() => {
        const s = document.createElement('script');
        s.textContent = 'window.__ran = true';
        document.body.appendChild(s);
        const st = document.createElement('style');
        st.textContent = 'body { background: red }';
        document.head.appendChild(st);
    }""")
    page.wait_for_timeout(200)  # let the violation events fire
    assert page.evaluate("window.__ran") is None
    found = problems(page, console)
    assert any(v.startswith("script-src-elem blocked inline") for v in found), found
    assert any(v.startswith("style-src-elem blocked inline") for v in found), found
