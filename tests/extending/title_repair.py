"""A trivial repair, written as docs/architecture.md §8 "Add a repair" says: one class
in one file (the project's own repairs live in ``sessions_app/actions/<name>.py``).
It supplies the plan and the statement; the guarded write does everything else."""

from sessions_app.actions.base import Action, Change, one


class TitleFromId(Action):
    name = "title_from_id"
    closed_activity_counts = False

    def plan(self, ctx, finding):
        title = f"untitled {finding.session_id}"
        plan = self.new_plan(ctx, finding, f"Set the title to '{title}'.",
                             changes=[Change("update", "sessions", {"id": finding.session_id}, "title", None, title)],
                             params={"title": title})
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def state(self, conn, caps, plan):
        return {"title": one(conn, "SELECT title FROM sessions WHERE id = ?", (plan.session_id,))}

    def write(self, conn, caps, plan):
        return conn.execute("UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL",
                            (plan.params["title"], plan.session_id)).rowcount

    def verify(self, conn, caps, plan):
        now = one(conn, "SELECT title FROM sessions WHERE id = ?", (plan.session_id,))
        return None if now == plan.params["title"] else f"title is {now!r}"
