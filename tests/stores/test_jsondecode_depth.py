"""The decoder's depth limit: the bracket count that lets it skip the depth walk
never changes a verdict (values at the limit decode, one level past it does not,
brackets inside strings count for nothing)."""

import json

from sessions_app.stores.jsondecode import Undecodable, decode


def nested(levels: int, inner="x") -> str:
    value = inner
    for n in range(levels):
        value = [value] if n % 2 else {"k": value}
    return json.dumps(value)


def test_the_limit_and_one_past_it():
    for limit in (0, 1, 2, 5, 64):
        assert not isinstance(decode(nested(limit), max_depth=limit), Undecodable)
        past = decode(nested(limit + 1), max_depth=limit)
        assert isinstance(past, Undecodable) and past.kind == "depth"


def test_brackets_inside_strings_do_not_make_a_value_deep():
    text = json.dumps([{"arguments": "[[[[{{{{" * 40}])
    assert decode(text, max_depth=2) == [{"arguments": "[[[[{{{{" * 40}]
    assert isinstance(decode(text, max_depth=1), Undecodable)


def test_many_shallow_containers_are_not_deep():
    text = json.dumps([[{"a": [1]}] for _ in range(200)])
    assert len(decode(text, max_depth=4)) == 200
    assert decode(text, max_depth=3).kind == "depth"


def test_the_configured_limits_follow_a_change_of_settings():
    """The limits are read from settings once, and again when either setting changes
    (``override_settings``): a decode after the change applies the new limit, and
    the old one once the override ends."""
    from django.test import override_settings

    text = nested(3)
    assert not isinstance(decode(text), Undecodable)  # the default depth (64), now remembered
    with override_settings(HERMES_JSON_MAX_DEPTH=2):
        assert decode(text).kind == "depth"
        with override_settings(HERMES_JSON_MAX_BYTES=4):
            assert decode(text).kind == "size"
        assert decode(text).kind == "depth"
    assert not isinstance(decode(text), Undecodable)
