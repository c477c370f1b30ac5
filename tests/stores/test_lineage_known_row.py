"""The session page hands ``Lineage`` the session row it has read (issue 16): the
parent, children and compression chain are what reading the row again gives, on
every session of every store in the test home (chains, resets, missing parents)."""

from sessions_app.stores.lineage import Lineage
from sessions_app.stores.session_info import session_row
from tests.checks.helpers import all_stores


def test_known_row_gives_the_same_lineage(hermes_home):
    compared, chained = 0, 0
    for store in all_stores(hermes_home):
        try:
            with store.read(lenient=True) as conn:
                caps = store.capabilities(conn)
                if not caps.has_table("sessions"):
                    continue
                ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
                for sid in ids:
                    row = session_row(conn, caps, sid)
                    plain = Lineage(conn, caps.columns("sessions"))
                    known = Lineage(conn, caps.columns("sessions"), known=row)
                    assert known.get(sid) == plain.get(sid) and known.get(sid) is not known.get(sid)
                    assert known.parent(row) == plain.parent(row)
                    assert known.children(sid) == plain.children(sid)
                    assert known.chain(sid) == plain.chain(sid)
                    compared += 1
                    chained += len(plain.chain(sid)) > 1
        except Exception as exc:  # a damaged store of the home: not this test's business
            if "malformed" in str(exc) or "not a database" in str(exc) or "unable to open" in str(exc):
                continue
            raise
    assert compared > 20 and chained > 0
