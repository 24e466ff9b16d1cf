from django.contrib.auth import views as auth_views
from django.urls import include, path

from console.api import api

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    path("", include("console.console_urls")),
    path("", include("jobs.urls")),
    path("access/", include("accesspolicies.urls")),
    path("catalog/", include("models_catalog.urls")),
]
