"""Run one bulk export in a fresh process and report its memory (used by
``test_bulk_export_memory``): ``python bulk_export_worker.py <home> <out.zip> <data>``.

Prints one JSON line: ``rss_before_mb`` (after Django and the imports, before the
export), ``peak_mb`` (``VmHWM`` at the end: the process's peak resident set),
``bytes`` (ZIP size). The ZIP's chunks go straight to ``out.zip``, as a response
would send them.
"""

import json
import os
import sys
from pathlib import Path


def status(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(field)


def main() -> None:
    home, out, data = sys.argv[1:4]
    os.environ["HERMES_ROOTS"] = home
    os.environ["HERMES_ADMIN_DATA"] = data
    os.environ["DJANGO_SETTINGS_MODULE"] = "hermes_admin.settings"
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import django

    django.setup()
    from sessions_app.stores import registry
    from sessions_app.stores.bulk_export import zip_stream
    from sessions_app.stores.listing import Filters

    stores = registry.stores()
    before = status("VmRSS")
    size = 0
    with open(out, "wb") as fh:
        for chunk in zip_stream([s.glance() for s in stores], {s.key: s for s in stores}, Filters(), masked=False):
            fh.write(chunk)
            size += len(chunk)
    print(json.dumps({"rss_before_mb": before, "peak_mb": status("VmHWM"), "bytes": size}))


if __name__ == "__main__":
    main()
