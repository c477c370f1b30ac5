"""Template context shared by every page.

``demo_homes``: the configured Hermes roots that are demo homes built by
``manage.py make_demo_home`` (``scripts/demo_home.py`` writes the marker file
:data:`DEMO_MARKER` at the root), so ``_base.html`` can say on every page that
what is shown is demo data and where it lives. One ``stat`` per root per page;
nothing is opened. ``fleet_mode``: whether a broker is configured (issue 17), so
the navigation links the fleet's pages.
"""

from __future__ import annotations

import os

from .stores import registry

DEMO_MARKER = ".hermes-admin-demo"


def demo_home(request) -> dict:
    """``{"demo_homes": [root path, ...]}``: roots holding :data:`DEMO_MARKER`."""
    roots = registry.current().roots
    return {"demo_homes": [str(root) for root in roots if os.path.isfile(os.path.join(root, DEMO_MARKER))]}


def fleet(request) -> dict:
    """``{"fleet_nav": True}`` in fleet mode (``settings.FLEET``), else nothing."""
    from django.conf import settings

    return {"fleet_nav": True} if getattr(settings, "FLEET", False) else {}
