"""A repair preview in real Chromium reads as a table: labelled columns, one row per
change, times as relative words with the exact UTC time on hover, no Python reprs."""

import re

import pytest

from tests.conftest import IDS

pytestmark = pytest.mark.e2e
REPR = re.compile(r"\{'|': |\[\{|\bNone\b|\bTrue\b|\bFalse\b|\d{10}\.\d")


def test_a_repair_preview_reads_as_a_table(logged_in, live_server, orphaned_long, tmp_path):
    page = logged_in
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/p/default/s/{IDS['long']}/repair/?check=orphan_messages")
    table = page.locator("table.plan")
    assert table.locator("thead th").all_inner_texts() == ["Change", "Row", "Field", "Before", "After"]
    rows = table.locator("tbody tr")
    assert rows.count() == 1
    cells = rows.first.locator("td")
    assert cells.nth(0).inner_text() == "Add"
    assert cells.nth(1).inner_text() == f"Session {IDS['long']}"
    after = cells.nth(4)
    # The inserted row is a list of labelled fields, one "label value" line each.
    labels = after.locator(".field-label").all_inner_texts()
    assert labels[:3] == ["Session id", "Source", "Started"] and "Messages" in labels
    lines = after.locator(".cell-fields > div").all_inner_texts()
    assert lines[1] == "Source unknown" and lines[0] == f"Session id {IDS['long']}"
    started = after.locator("time")
    assert re.fullmatch(r"\d+ (months?|weeks?) ago", started.inner_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", started.get_attribute("title"))
    text = page.locator("main").inner_text()
    assert not REPR.search(text), REPR.search(text)
    assert "started_at" not in text and "message_count" not in text
    page.screenshot(path=str(tmp_path / "repair-1400.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(tmp_path / "repair-390.png"), full_page=True)
    # Still one line per field when narrow (as high as the shortest field's line).
    heights = [after.locator(f'[data-column="{c}"]').bounding_box()["height"] for c in ("source", "tool_call_count")]
    assert heights[0] == heights[1]
    if (out := __import__("os").environ.get("HERMES_SCREENSHOTS")):
        import shutil
        for name in ("repair-1400.png", "repair-390.png"):
            shutil.copy(tmp_path / name, out)
