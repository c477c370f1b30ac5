"""A trivial check, written as docs/architecture.md §8 "Add a check" says: one class
in one file (the project's own checks live in ``sessions_app/checks/<family>.py``)."""

from sessions_app.checks.base import Check, Finding


class UntitledEndedSession(Check):
    code = "untitled_ended_session"
    severity = "info"
    title = "Ended session without a title"
    explanation = "An ended session has no title; lists show its id instead."
    heal = "title_from_id"
    requires = (("sessions", "title"), ("sessions", "ended_at"))

    def run(self, ctx):
        extra, params = ctx.session_filter("id")
        for (sid,) in ctx.conn.execute(
                f"SELECT id FROM sessions WHERE title IS NULL AND ended_at IS NOT NULL{extra} ORDER BY id", params):
            yield Finding(self.code, self.severity, sid, 1, "ended without a title", self.heal)
