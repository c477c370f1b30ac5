"""A page row decodes its content and its tool calls once (issue 16): what it shows
and the markers it carries are what the single-value readers say about the same
stored values, hostile ones included (broken, too deep, not a list, bytes, numbers,
values left in SQLite for their size, cut page copies)."""

import copy
import itertools

from sessions_app.stores.transcript import (
    TEXT_LIMIT, Transcript, content_problem, decode_content, parse_tool_calls, tool_calls_problem, visible_text)

P = "\x00json:"
DEEP = "[" * 300 + "]" * 300
CONTENTS = [None, "", "plain \x01 text", b"bytes \xff", 5, P, P + "[", P + '["a", {"type": "text", "text": "t"}]',
            P + DEEP, P + '{"type": "image_url", "image_url": {"url": "data:xx,yyy"}}', P + '"str"', P + "null"]
CALLS = [None, "", b"", 0, 7, "[", "{}", "[]", "null", '{"a": 1}', '"s"', "[1, 2]", "true", DEEP,
         b'[{"id": "c1", "function": {"name": "f", "arguments": "{\\"x\\": 1}"}}]',
         '[{"id": "c1", "call_id": "c2", "name": "n\x02", "arguments": {"k": [1]}}, 3, "x"]',
         '[{"function": {"arguments": "' + "[" * 300 + '"}}]']


def _row(content, calls, role, length, calls_length):
    return {"id": 1, "role": role, "content": content, "content_length": length,
            "tool_calls": None if calls_length else calls, "tool_calls_length": calls_length,
            "reasoning": None, "reasoning_length": 0, "reasoning_content": None, "reasoning_content_length": 0}


def test_page_row_matches_the_single_value_readers():
    for content, calls, role, length, calls_length in itertools.product(
            CONTENTS, CALLS, ["assistant", "tool", "user"], [0, None, TEXT_LIMIT + 5], [None, 40_000_000]):
        msg = Transcript._message(copy.deepcopy(_row(content, calls, role, length, calls_length)))
        shown = msg.row["content"]  # as the row holds it (bytes read as text, a cut copy's split character dropped)
        text, structured = decode_content(shown)
        assert msg.text == visible_text(text) and msg.structured == structured
        markers = dict(msg.undecodable)
        problem = content_problem(shown, cut=(length or 0) > TEXT_LIMIT)
        assert markers.get("content") == (problem.marker if problem else None)
        if calls_length:
            assert "past the" in markers["tool_calls"] and msg.tool_calls == []
            continue
        wants_marker = role == "assistant" or calls not in (None, "", b"")
        problem = tool_calls_problem(calls) if wants_marker else None
        assert markers.get("tool_calls") == (problem.marker if problem else None)
        expected = [{**c, "name": visible_text(c["name"]), "arguments": visible_text(c["arguments"])}
                    for c in parse_tool_calls(calls)] if role == "assistant" else []
        assert msg.tool_calls == expected


def test_visible_text_replaces_the_same_characters_as_the_expression():
    from sessions_app.stores.transcript import CONTROL_RE, REPLACEMENT

    for start in range(0, 0x110000, 256):
        chars = [chr(c) for c in range(start, min(start + 256, 0x110000))]
        for text in ["".join(chars), *chars]:
            assert visible_text(text) == CONTROL_RE.sub(REPLACEMENT, text)


def test_page_rows_against_fixed_expectations():
    """The readers above share their helpers with the page row, so a fault in a helper
    would pass the comparison: these values are written out."""
    def shown(content, calls):
        m = Transcript._message(_row(content, calls, "assistant", 0, None))
        return m.text, m.structured, m.undecodable, m.tool_calls

    assert shown(P + "[", None) == ("[", None, [(
        "content", "[undecodable: not JSON (Expecting value: line 1 column 2 (char 1))]")], [])
    assert shown(P + DEEP, None)[2] == [("content", "[undecodable: nested deeper than 64 levels]")]
    assert shown(P + '["a", {"type": "text", "text": "t"}]', None) == (
        "a\n\nt", ["a", {"type": "text", "text": "t"}], [], [])
    assert shown(None, DEEP)[2:] == ([("tool_calls", "[undecodable: nested deeper than 64 levels]")], [])
    assert shown(None, '{"a": 1}')[2] == [("tool_calls", "[undecodable: JSON dict, not a list of tool calls]")]
    assert shown(None, 7)[2] == [("tool_calls", "[undecodable: a int (7), not a JSON list of tool calls]")]
    assert shown(None, b'[{"id": "c1", "function": {"name": "f", "arguments": "{\\"x\\": 1}"}}]') == (
        "", None, [], [{"id": "c1", "ids": ["c1"], "name": "f", "arguments": '{\n  "x": 1\n}'}])
