"""Bidi isolation (issue 13): an unclosed RIGHT-TO-LEFT OVERRIDE (U+202E) in a
store value cannot reorder the page's own text around it.

A real hermes-agent 0.19.0 ``SessionDB`` writes a session whose id, source,
model, end reason, messages, tool call and tool result hold U+202E (0.19.0's
``sanitize_title`` strips bidi controls from titles, so the title is written the
way an older release or another tool leaves it: plain SQL). Every page that shows
them is parsed: each text node holding U+202E must be the only content of a
``<bdi>`` or of an element with ``dir``, or, where no element can be used
(``<title>``, ``<option>``), sit between FIRST STRONG ISOLATE and POP DIRECTIONAL
ISOLATE.
"""

from html.parser import HTMLParser
from urllib.parse import quote

import pytest
from django.contrib.auth import authenticate
from django.test import RequestFactory

from sessions_app.actions import deletion
from sessions_app.models import AuditEvent, HealRun
from sessions_app.stores import registry
from tests.actions.conftest import age_store, heal
from tests.checks.helpers import damage, hermes

pytestmark = pytest.mark.django_db
RLO, FSI, PDI = "\u202e", "\u2068", "\u2069"
SID = f"20260301_120000_{RLO}evil"
TITLE = f"Quarterly {RLO}report"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Tree(HTMLParser):
    """Text nodes with their parent element (tag, attrs, children)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = {"tag": "#root", "attrs": {}, "children": [], "parent": None}
        self.current = self.root
        self.texts = []

    def handle_starttag(self, tag, attrs):
        node = {"tag": tag, "attrs": dict(attrs), "children": [], "parent": self.current}
        self.current["children"].append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag):
        node = self.current
        while node is not self.root and node["tag"] != tag:
            node = node["parent"]
        if node is not self.root:
            self.current = node["parent"]

    def handle_data(self, data):
        self.current["children"].append(data)
        self.texts.append((data, self.current))


def _fsi_wrapped(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch == FSI:
            depth += 1
        elif ch == PDI:
            depth = max(0, depth - 1)
        elif ch == RLO and depth == 0:
            return False
    return True


def unisolated(html: str) -> list[str]:
    """Text nodes holding U+202E that are not isolated from the page around them."""
    tree = Tree()
    tree.feed(html)
    bad = []
    for text, parent in tree.texts:
        if RLO not in text:
            continue
        if parent["tag"] in ("title", "option"):
            ok = _fsi_wrapped(text)
        else:
            isolates = parent["tag"] == "bdi" or "dir" in parent["attrs"]
            others = [c for c in parent["children"] if c is not text and not (isinstance(c, str) and not c.strip())]
            ok = isolates and not others
        if not ok:
            bad.append(f"<{parent['tag']} {parent['attrs']}>: {text.strip()[:80]!r}")
    return bad


def page(client, url) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


@pytest.fixture
def hostile(hermes_home, settings, tmp_path):
    """The default profile (0.19.0 store) with one session full of U+202E."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    store = registry.get("default")
    hermes(store, f"""
sid = {SID!r}
db.create_session(sid, "tele{RLO}gram", model="gpt-{RLO}5")
db.append_message(sid, "user", "please {RLO}reverse the numbers")
db.append_message(sid, "assistant", None, tool_calls=[{{"id": "call_{RLO}1", "type": "function",
    "function": {{"name": "ter{RLO}minal", "arguments": '{{"cmd": "ls {RLO}-la"}}'}}}}])
db.append_message(sid, "tool", "out{RLO}put of ls", tool_call_id="call_{RLO}1", tool_name="ter{RLO}minal")
db.append_message(sid, "assistant", "Done {RLO}here.", finish_reason="st{RLO}op")
db.end_session(sid, "user_{RLO}exit")
""")
    with damage(store) as db:  # as an older release (or any other tool) leaves a title
        db.execute("UPDATE sessions SET title = ? WHERE id = ?", (TITLE, SID))
    age_store(store.path, 40 * 86400)  # long idle: deletable
    registry.reset()
    return store


def test_hostile_values_reach_the_pages_isolated(admin_client, hostile):
    sid = quote(SID)
    urls = [
        "/sessions/?profile=default",
        f"/sessions/?profile=default&q={quote('Quarterly')}",
        f"/p/default/s/{sid}/",
        f"/p/default/s/{sid}/delete/",
        f"/p/default/search/?q={quote('numbers')}",
        f"/p/default/search/?q={quote('ls')}",
        f"/search/?q={quote('numbers')}",
        f"/search/?q={quote('Quarterly')}",
        f"/p/default/search/scan/?all=1&q={quote('reverse')}",
        "/usage/?date_from=&date_to=&group=model",
        "/usage/?date_from=&date_to=&group=source",
    ]
    seen = 0
    for url in urls:
        html = page(admin_client, url)
        seen += html.count(RLO)
        assert unisolated(html) == [], url
    assert seen > 20  # the values really are on the pages, not dropped
    detail = page(admin_client, f"/p/default/s/{sid}/")
    # The tab title is plain text: the title without its bidi controls, no isolates.
    plain_title = TITLE.replace(RLO, "").replace(FSI, "").replace(PDI, "")
    assert f"<title>{plain_title} · hermes-admin</title>" in detail
    assert f"<h1><bdi>{TITLE}</bdi></h1>" in detail
    listing = page(admin_client, "/sessions/?profile=default")
    assert f">{FSI}tele{RLO}gram{PDI}</option>" in listing  # the source filter


def test_findings_runs_trash_and_audit_isolate_them_too(admin_client, hostile, settings):
    # A JSONL copy with a line the store lacks: findings, the migration page and the comparison.
    folder = hostile.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    (folder / f"{SID}.jsonl").write_text(
        '{"role": "user", "content": "please \\u202ereverse the numbers"}\n'
        '{"role": "assistant", "content": "a reply only the file \\u202ehas"}\n')
    code, report = heal("--profile", "default", "--json")
    assert code in (0, 1)
    run = HealRun.objects.latest("pk")
    sid = quote(SID)
    urls = ["/p/default/health/", f"/p/default/s/{sid}/", f"/p/default/s/{sid}/jsonl/", "/p/default/migrate/",
            "/runs/", f"/runs/{run.pk}/"]
    for url in urls:
        assert unisolated(page(admin_client, url)) == [], url

    # Deleted into the trash.
    plan = deletion.plan_for(hostile, SID)
    item = deletion.unsign(deletion.sign([deletion.token_item(plan)]))[0]
    done = deletion.Deleter(actor_label="admin").delete(hostile, item, override=SID, may_override=True)
    assert done.status == "applied", done.reason
    for url in ["/trash/", f"/trash/{done.entry.id}/"]:
        html = page(admin_client, url)
        assert RLO in html and unisolated(html) == [], url

    # A failed login under a hostile user name, and the deletion, in the audit trail
    # (a name that is no user's is not written down at all: it may be a password).
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(f"mal{RLO}lory", password="right")
    authenticate(RequestFactory().post("/login/"), username=f"mal{RLO}lory", password="x")
    for event in AuditEvent.objects.all():
        html = page(admin_client, f"/audit/{event.pk}/")
        assert unisolated(html) == [], (event.action, html.count(RLO))
    html = page(admin_client, "/audit/")
    assert RLO in html and unisolated(html) == []
    assert "mal\\u202elory" in html  # the typed name is shown escaped (repr) in the reason


def test_the_checker_catches_what_it_should():
    assert unisolated(f"<p>Title: {TITLE} was renamed</p>")
    assert unisolated(f"<p><span>{TITLE}</span> was renamed</p>")  # a span does not isolate
    assert unisolated(f"<p dir=auto>{TITLE} <b>was</b> renamed</p>")  # page text inside the isolate
    assert unisolated(f"<title>{TITLE} · hermes-admin</title>")
    assert not unisolated(f"<p><bdi>{TITLE}</bdi> was renamed</p>")
    assert not unisolated(f'<td dir="auto">{TITLE}</td>')
    assert not unisolated(f"<title>{FSI}{TITLE}{PDI} · x</title>")



def test_prune_pages_and_the_prune_run_isolate_them(admin_client, hostile, settings):
    """The Prune page's preview (titles, sources, ids, spared details), Hermes' own
    auto-prune list and the run page of the prune (issue 14)."""
    from sessions_app.actions.prune_run import Pruner, run_prune
    from sessions_app.stores.retention import Criteria

    (hostile.profile.home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 30\n")
    for url in ["/p/default/prune/?older_than=30", f"/prune/?match={quote('quarterly')}", "/p/default/prune/"]:
        html = page(admin_client, url)
        assert RLO in html and unisolated(html) == [], url
    run = HealRun.objects.create(mode="prune", trigger="command", actor_label="t", status="done",
                                 report=run_prune([hostile], Criteria(match="quarterly"), apply=True,
                                                  writer=Pruner(actor_label="t")))
    html = page(admin_client, f"/runs/{run.pk}/")
    assert RLO in html and unisolated(html) == []
