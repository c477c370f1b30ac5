"""Memory and time of reading a session's copies: a snapshot of a 100,000-message
session read by ``stores.copies`` (streamed with ijson) against ``json.load``.

    .venv/bin/python bench/copies.py [--messages 100000] [--chars 2000]

Each reader runs in a fresh subprocess; its peak RSS is the process's ``VmHWM``
(Linux). The snapshot is written in 0.19.0's ``_save_session_log`` shape into a
temporary folder and removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SID = "20260401_100000_be7c40"


def peak_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def write_snapshot(path: Path, messages: int, chars: int) -> None:
    body = "lorem ipsum " * (chars // 12)
    with open(path, "w") as fh:
        fh.write(json.dumps({"session_id": SID, "model": "bench/model", "session_start": "2026-04-01T10:00:00",
                             "message_count": messages})[:-1] + ', "messages": [')
        for n in range(messages):
            role = "user" if n % 2 == 0 else "assistant"
            fh.write(("," if n else "") + json.dumps({"role": role, "content": f"{n} {body}"}, indent=2))
        fh.write("]}")


def child(mode: str, path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")
    sys.path.insert(0, str(REPO))
    start = time.perf_counter()
    if mode == "ijson":
        import django
        django.setup()
        from sessions_app.stores import copies
        copy = copies.read_json_copy(Path(path), "snapshot", SID, store_paths=[Path(path).parent / "state.db"])
        count = copy.message_count
    else:
        with open(path, encoding="utf-8") as fh:
            count = len(json.load(fh)["messages"])
    print(json.dumps({"mode": mode, "seconds": round(time.perf_counter() - start, 2), "messages": count,
                      "peak_mb": peak_mb()}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--chars", type=int, default=2000, help="characters per message")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-copies-") as tmp:
        path = Path(tmp) / f"session_{SID}.json"
        write_snapshot(path, args.messages, args.chars)
        print(f"snapshot: {args.messages} messages, {path.stat().st_size / 2**20:.0f} MiB")
        for mode in ("ijson", "json.load"):
            out = subprocess.run([sys.executable, __file__, "--child", mode, str(path)], capture_output=True,
                                 text=True, cwd=REPO, env={**os.environ, "HERMES_ADMIN_DATA": tmp})
            print(out.stdout.strip() or out.stderr.strip()[-2000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
