"""The product's settings, with the floor views (``bench/floor.py``) routed beside
the product's pages: same middleware, session authentication and database."""

from hermes_admin.settings import *  # noqa: F401,F403

ROOT_URLCONF = "bench.urls"
