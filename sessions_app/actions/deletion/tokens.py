"""Confirmation tokens of a deletion: signed, bound to a user, good for one deletion.

Each item carries a nonce; the audit event of the deletion records it, and an
item whose nonce is already in an applied deletion is refused (after a restore
the same token does not delete again). Signing is Django's (``django.core.signing``).
"""

from __future__ import annotations

import secrets

from django.core import signing

from ...models import AuditEvent
from .plan import DELETE_ACTION, DeletePlan

TOKEN_SALT = "delete-sessions"
TOKEN_MAX_AGE = 3600  # seconds a confirmation stays valid


class TokenMismatch(signing.BadSignature):
    """A genuine token used by another user than the one it was issued to."""


def sign(items: list[dict], user_id: int | None = None) -> str:
    """A confirmation token for ``items`` ({profile, session_id, lineage, fingerprint} each),
    issued to ``user_id``. Each item gets a fresh ``nonce``: the deletion's audit
    event records it, so the item deletes at most once (see ``Deleter.delete``)."""
    items = [dict(item, nonce=secrets.token_hex(12)) for item in items]
    return signing.dumps({"items": items, "uid": user_id}, salt=TOKEN_SALT, compress=True)


def token_item(plan: DeletePlan) -> dict:
    return {"profile": plan.profile, "session_id": plan.session_id, "lineage": plan.lineage,
            "fingerprint": plan.fingerprint}


def unsign(token: str, user_id: int | None = None, max_age: int = TOKEN_MAX_AGE) -> list[dict]:
    """The items of a token issued to ``user_id``; raises ``signing.SignatureExpired``,
    :class:`TokenMismatch` (another user's token) or ``BadSignature``."""
    data = signing.loads(token or "", salt=TOKEN_SALT, max_age=max_age)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise signing.BadSignature("malformed confirmation")
    if data.get("uid") != user_id:
        raise TokenMismatch("this confirmation was issued to another user")
    return items


def used_by(nonce: str | None) -> AuditEvent | None:
    """The applied deletion that already used the confirmation item ``nonce``, if any."""
    if not nonce:
        return None
    return AuditEvent.objects.filter(action=DELETE_ACTION, outcome="applied", plan__token_nonce=nonce).first()
