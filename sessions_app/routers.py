"""Keep store models on their store's alias and migrations away from stores.

Store models (``Meta.managed = False`` mirrors of Hermes tables) have no database of
their own: every query must say ``.using(store.alias)``. Falling back to ``default``
would hide that bug behind "no such table", so the router refuses instead.
"""

from django.core.exceptions import ImproperlyConfigured


def _is_store_model(model) -> bool:
    meta = getattr(model, "_meta", None)
    return meta is not None and meta.app_label == "sessions_app" and not meta.managed


class StoreRouter:
    def db_for_read(self, model, **hints):
        return self._db(model, hints)

    def db_for_write(self, model, **hints):
        return self._db(model, hints)

    def _db(self, model, hints):
        if not _is_store_model(model):
            return None
        instance = hints.get("instance")
        if instance is not None and instance._state.db:
            return instance._state.db
        raise ImproperlyConfigured(f"{model.__name__} lives in a Hermes store: query it with .using(store.alias)")

    def allow_relation(self, obj1, obj2, **hints):
        if _is_store_model(obj1) or _is_store_model(obj2):
            return obj1._state.db == obj2._state.db
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if db.startswith("store_"):
            return False
        model = hints.get("model")
        if model is not None and _is_store_model(model):
            return False
        return None
