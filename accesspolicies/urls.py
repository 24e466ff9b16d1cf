from django.urls import path

from accesspolicies import gateway_views, passwords, views

app_name = "accesspolicies"
urlpatterns = [
    path("members/", views.members, name="members"),
    path("members/invite/", views.invite, name="invite"),
    path(
        "invitations/<str:lookup>/withdraw/",
        views.invitation_withdraw,
        name="invitation-withdraw",
    ),
    path("join/<str:token>/", views.join, name="join"),
    # <path:…>: a username made before usernames were checked may hold a '/'.
    path("members/<path:username>/role/", views.member_role, name="member-role"),
    path("members/<path:username>/remove/", views.member_remove, name="member-remove"),
    path(
        "members/<path:username>/password-link/", passwords.reset_link, name="member-password-link"
    ),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/create/", views.token_create, name="token-create"),
    path("tokens/<str:lookup>/revoke/", views.token_revoke, name="token-revoke"),
    path("keys/", gateway_views.keys, name="keys"),
    path("keys/create/", gateway_views.key_create, name="key-create"),
    path("keys/<str:name>/revoke/", gateway_views.key_revoke, name="key-revoke"),
    path("keys/<str:name>/rotate/", gateway_views.key_rotate, name="key-rotate"),
    path("policies/", gateway_views.policies, name="policies"),
    path("policies/create/", gateway_views.policy_create, name="policy-create"),
    path("policies/<str:name>/", gateway_views.policy_edit, name="policy-edit"),
    path("policies/<str:name>/delete/", gateway_views.policy_delete, name="policy-delete"),
    path("domains/", gateway_views.domains, name="domains"),
    path("domains/add/", gateway_views.domain_add, name="domain-add"),
    path("domains/<str:domain>/verify/", gateway_views.domain_verify, name="domain-verify"),
    path("domains/<str:domain>/remove/", gateway_views.domain_remove, name="domain-remove"),
    path("audit/", gateway_views.audit_log, name="audit"),
]
