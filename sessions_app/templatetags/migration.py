"""Template helpers for the migration links on the session page (issue 4)."""

from django import template

from ..actions.transcripts import jsonl_path
from ..stores import jsonl

register = template.Library()


@register.simple_tag
def jsonl_copy(store, session_id) -> str:
    """File name of the session's ``sessions/<id>.jsonl`` when one exists, else ''
    (an ``lstat`` of that one file, a symlink is not one; nothing is read)."""
    path = jsonl_path(store, session_id)
    return path.name if path is not None and jsonl.is_regular(path) else ""


@register.simple_tag
def other_copies(store, session_id) -> list[str]:
    """Keys of the other readable profiles whose store also holds ``session_id``
    (an ``id_collision``; see ``stores.registry.other_copies``)."""
    from ..stores import registry

    return registry.other_copies(store, session_id)
