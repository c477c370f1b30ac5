"""``secrets.mask`` skips the patterns and lines that cannot match (literal gates):
its result is the plain definition's, every pattern run over the text in turn and the
keyword detector over every line, on texts full of secrets, near-secrets and the
characters ``re.IGNORECASE`` folds to ASCII letters."""

import random

import pytest

from sessions_app import secrets
from sessions_app.secrets import MASK, fold, mask, required_literals


def plain_mask(text):
    """The definition: every pattern in turn, then the keyword detector on every line."""
    if not isinstance(text, str) or not text:
        return text
    for label, regex in secrets._patterns():
        text = regex.sub(MASK.format(label), text)
    if any(word in text.lower() for word in secrets.KEYWORD_HINTS):
        detector = secrets._keyword_detector()
        for line in set(text.splitlines()):
            for found in detector.analyze_line(filename="transcript.py", line=line, line_number=0):
                if found.secret_value and len(found.secret_value) >= 4:
                    text = text.replace(found.secret_value, MASK.format("keyword"))
    return text


SECRETS = [
    "sk-ant-api03-" + "Q7" * 24, "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123-456-abcdef", "password = 'hunter2hunter'", 'api_key: "abcd1234efgh"',
    "Authorization: Bearer abcdefghijklmnopqrstu", "OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123456789AB",
    "MY_TOKEN='zzzzzzzzzzzz'", "https://user:pa55word@example.com", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
    "-----BEGIN RSA PRIVATE KEY-----", "AccountKey=" + "a" * 88, "cloudant_password = 'abcdefghijklmnopqrstuvwxyz'",
    "ibm_cloud_iam_api_key: '" + "A" * 44 + "'", "sl_api_key = 'x'", "123456789:" + "A" * 35,
    "SG." + "a" * 22 + "." + "b" * 43, "sk_live_" + "a" * 24, "AC" + "a" * 32, "secret: 'abc'",
    "db_pass=\"longvalue99\"", "npm //registry.npmjs.org/:_authToken=npm_abc", "glpat-" + "x" * 20,
    "MNO" + "a" * 22 + "." + "b" * 6 + "." + "c" * 27, "https://hooks.slack.com/services/T0/B1/xyz",
    # re.IGNORECASE matches these to i, i, s, k: the gates must not miss them.
    "pa\u017f\u017fword = 'secretvalue1'", "\u0130BM_API_KEY='abcdefghijklmnop'", "\u212aEY = 'abcdefgh'",
    "contrase\u00f1a = 'hola1234'", "PA\u017fSWORD=abcdefghij", "[secret masked: keyword]",
]
WORDS = ("the deploy of kubernetes cluster failed because the token expired so npm install pytest git push "
         "def foo(bar): return bar + 1 import os path = os.environ['HOME'] ERROR key pass = : ' \" class "
         "client slack bearer aws").split(" ") + ["\n", "\n", "é", "ı", "\u212a"]


def corpus(seed: int, n: int = 1500):
    rng = random.Random(seed)
    for _ in range(n):
        parts = [rng.choice(WORDS) for _ in range(rng.randint(0, 50))]
        for _ in range(rng.randint(0, 3)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(SECRETS))
        yield rng.choice([" ", "", "\n", "="]).join(parts)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mask_is_the_plain_definition(seed):
    masked = 0
    for text in [*corpus(seed), *SECRETS]:
        expected = plain_mask(text)
        assert mask(text) == expected, text
        masked += expected != text
    assert masked > 500  # the corpus is full of secrets


def test_every_gate_holds_literals_of_its_pattern():
    for _label, regex in secrets._patterns():
        ignorecase, requirements = required_literals(regex)
        for options in requirements:
            assert options and all(isinstance(s, str) and s for s in options)
            if ignorecase:
                assert all(s == s.lower() for s in options)
    gated = sum(1 for _label, regex in secrets._patterns() if required_literals(regex)[1])
    assert gated >= len(secrets._patterns()) - 2  # nearly every pattern has one


def test_fold_maps_what_ignorecase_matches_to_ascii():
    assert fold("PA\u017f\u017f \u0130BM \u0131d \u212aEY") == "pass ibm id key"


def test_non_strings_and_empty_text_pass_through():
    assert mask(None) is None and mask("") == "" and mask(42) == 42


def test_masked_texts_are_remembered_by_their_text_within_a_bound(monkeypatch):
    """``mask_remembered`` gives what ``mask`` gives, for texts with and
    without secrets, the same text answered from memory, a changed text masked
    anew, and the memory kept under ``MEMO_CHARS`` characters."""
    monkeypatch.setattr(secrets, "_memo", type(secrets._memo)())
    monkeypatch.setattr(secrets, "_memo_size", [0])
    monkeypatch.setattr(secrets, "MEMO_CHARS", 1000)
    calls, real = [], secrets.mask
    monkeypatch.setattr(secrets, "mask", lambda text: calls.append(text) or real(text))
    key = "sk-ant-api03-" + "Mm3Nn4Bb" * 5
    texts = [f"use {key} now", "nothing secret here", "password=hunter2hunter2", "", None, "ü … \ufffd"]
    for text in texts * 2:
        assert secrets.mask_remembered(text) == real(text)
    assert calls.count(f"use {key} now") == 1 and calls.count("nothing secret here") == 1
    assert secrets.mask_remembered(f"use {key} later") == real(f"use {key} later")  # another text, masked anew
    for i in range(100):
        secrets.mask_remembered(f"filler text number {i}")
    assert 0 < secrets._memo_size[0] <= 1000
    assert secrets._memo_size[0] == sum(len(v) + secrets.MEMO_ENTRY for v in secrets._memo.values())
    assert secrets.mask_remembered("filler text number 99") == "filler text number 99"
