"""Presenters: what a page shows, computed before it renders (docs/architecture.md §7, Faces).

A view parses its request and calls one presenter, which reads the stores (through
``stores`` / ``checks``), masks the texts it returns once for the user who looks
(``secrets.masker_for``), and returns plain data (dataclasses, dicts, lists) that
the template only formats. Templates and template tags open no store; views run no
SQL. A presenter raises :class:`NotFound` for what does not exist (the view
answers 404) and lets ``sqlite3`` / Django database errors through (the view's
``store_view`` turns them into the store's error page).
"""


class NotFound(Exception):
    """What the page is about does not exist (the view answers 404 with this text)."""
