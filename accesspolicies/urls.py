from django.urls import path

from accesspolicies import passwords, views

app_name = "accesspolicies"
urlpatterns = [
    path("members/", views.members, name="members"),
    path("members/add/", views.member_add, name="member-add"),
    path("members/<str:username>/role/", views.member_role, name="member-role"),
    path("members/<str:username>/remove/", views.member_remove, name="member-remove"),
    path(
        "members/<str:username>/password-link/", passwords.reset_link, name="member-password-link"
    ),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/create/", views.token_create, name="token-create"),
    path("tokens/<str:lookup>/revoke/", views.token_revoke, name="token-revoke"),
]
