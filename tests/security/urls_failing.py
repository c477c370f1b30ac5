"""The dashboard's URLs plus one view that fails, to see what a server error leaves behind."""

from django.urls import include, path


def failing(request):
    raise RuntimeError("boom-7f3a: an unexpected failure")


urlpatterns = [path("boom/", failing), path("", include("hermes_admin.urls"))]
