from django.contrib.auth import views as auth_views
from django.urls import include, path, reverse_lazy

from accesspolicies import passwords
from console import views
from console.api import api

handler404 = views.page_not_found

urlpatterns = [
    path("favicon.ico", views.favicon, name="favicon"),
    path("login/", passwords.LoginView.as_view(), name="login"),
    path(
        "password/change/",
        auth_views.PasswordChangeView.as_view(success_url=reverse_lazy("password-change-done")),
        name="password-change",
    ),
    path(
        "password/change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password-change-done",
    ),
    path(
        "password/set/<uidb64>/<token>/", passwords.PasswordSetView.as_view(), name="password-set"
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    path("", include("console.console_urls")),
    path("", include("jobs.urls")),
    path("access/", include("accesspolicies.urls")),
    path("catalog/", include("models_catalog.urls")),
]
