from django.urls import path

from accesspolicies import passwords
from accesspolicies.views import audit, domains, keys, members, policies, tokens

app_name = "accesspolicies"
urlpatterns = [
    path("members/", members.members, name="members"),
    path("members/invite/", members.invite, name="invite"),
    path(
        "invitations/<str:lookup>/withdraw/",
        members.invitation_withdraw,
        name="invitation-withdraw",
    ),
    path("join/<str:token>/", members.join, name="join"),
    # <path:…>: a username made before usernames were checked may hold a '/'.
    path("members/<path:username>/role/", members.member_role, name="member-role"),
    path("members/<path:username>/remove/", members.member_remove, name="member-remove"),
    path(
        "members/<path:username>/password-link/", passwords.reset_link, name="member-password-link"
    ),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/create/", tokens.token_create, name="token-create"),
    path("tokens/<str:lookup>/revoke/", tokens.token_revoke, name="token-revoke"),
    path("keys/", keys.keys, name="keys"),
    path("keys/create/", keys.key_create, name="key-create"),
    path("keys/<str:name>/revoke/", keys.key_revoke, name="key-revoke"),
    path("keys/<str:name>/rotate/", keys.key_rotate, name="key-rotate"),
    path("policies/", policies.policies, name="policies"),
    path("policies/create/", policies.policy_create, name="policy-create"),
    path("policies/<str:name>/", policies.policy_edit, name="policy-edit"),
    path("policies/<str:name>/delete/", policies.policy_delete, name="policy-delete"),
    path("domains/", domains.domains, name="domains"),
    path("domains/add/", domains.domain_add, name="domain-add"),
    path("domains/<str:domain>/verify/", domains.domain_verify, name="domain-verify"),
    path("domains/<str:domain>/remove/", domains.domain_remove, name="domain-remove"),
    path("audit/", audit.audit_log, name="audit"),
]
