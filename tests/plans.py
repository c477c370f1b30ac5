"""Plan tokens in tests: what an Apply form's token refers to, and a forged one.

The plans behind an Apply form stay in the user's login session
(``views.common.plan_token``); a test that needs a plan the pages would never
issue (another session's, another profile's) puts it there itself, as a bug in a
view could, to show the apply view still refuses it.
"""

import secrets

from django.core import signing

from sessions_app.views.common import PLANS_SESSION_KEY


def kept_plans(client, token: str, salt: str):
    """The plans the login session of ``client`` keeps for ``token``."""
    nonce = signing.loads(token, salt=salt)["nonce"]
    return client.session[PLANS_SESSION_KEY][nonce]["plans"]


def planted_token(client, user, salt: str, plans) -> str:
    """A token for ``plans`` kept in ``client``'s login session, issued to ``user``."""
    session = client.session
    nonce = secrets.token_urlsafe(18)
    session[PLANS_SESSION_KEY] = {**(session.get(PLANS_SESSION_KEY) or {}), nonce: {"salt": salt, "plans": plans}}
    session.save()
    return signing.dumps({"nonce": nonce, "uid": user.pk}, salt=salt)


def decoded_values(html: str) -> list[str]:
    """Every token-looking value of ``html`` decoded as ``django.core.signing``
    encodes (URL-safe base64 of JSON, zlib-compressed when it starts with a dot),
    one text per ``:``-separated piece that decodes: what anyone holding the page
    can read out of its forms."""
    import base64
    import binascii
    import re
    import zlib

    found = []
    for value in re.findall(r"[A-Za-z0-9_\-.:]{16,}", html):
        for piece in value.split(":"):
            raw = piece.lstrip(".")
            try:
                data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
            except (binascii.Error, ValueError):
                continue
            try:
                data = zlib.decompress(data)
            except zlib.error:
                pass
            found.append(data.decode("utf-8", "replace"))
    return found
