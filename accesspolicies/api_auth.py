"""How the REST API knows who calls: a personal access token, or the browser session (with CSRF)."""

from ninja.security import HttpBearer, SessionAuth

from accesspolicies.models import Membership, PersonalAccessToken


class TokenAuth(HttpBearer):
    """`Authorization: Bearer sdp_…`: acts as the token's owner, with their current role."""

    def authenticate(self, request, token):
        found = PersonalAccessToken.objects.authenticate(token)
        if found is None:
            return None
        return (
            Membership.objects.select_related("organization", "user")
            .filter(user=found.user, organization=found.organization)
            .first()
        )


class SessionMemberAuth(SessionAuth):
    """The console's own session; unsafe methods need the CSRF token, as in the pages."""

    def __call__(self, request):
        # No session, no CSRF question: the caller is unauthenticated (401), not refused (403).
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)

    def authenticate(self, request, key):
        if not request.user.is_authenticated:
            return None
        return request.membership or None
