"""The product's settings with the store-lock logger at DEBUG, for command subprocesses
whose every wait for a locked store a test counts (``sessions_app.stores.busy`` logs
one line per lock error, with the busy timeout it waited)."""

from hermes_admin.settings import *  # noqa: F401,F403
from hermes_admin.settings import LOGGING

LOGGING = {**LOGGING, "loggers": {**LOGGING["loggers"], "sessions_app.stores.busy": {"level": "DEBUG"}}}
