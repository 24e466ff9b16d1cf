from django.urls import path

from accesspolicies import views

app_name = "accesspolicies"
urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/create/", views.token_create, name="token-create"),
    path("tokens/<str:lookup>/revoke/", views.token_revoke, name="token-revoke"),
]
