from django.contrib.auth import views as auth_views
from django.urls import include, path

from sessions_app.views.login import LoginView

urlpatterns = [
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("sessions_app.urls")),
]

handler403 = "sessions_app.views.common.permission_denied"  # audits refused POSTs
