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
