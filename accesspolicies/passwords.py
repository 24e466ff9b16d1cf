"""Logging in (throttled), changing one's own password, and an admin's one-time reset link."""

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies import throttle
from accesspolicies.access import require
from accesspolicies.models import Membership, Role
from accesspolicies.shown_once import flash_secret

INVALID_LOGIN = (
    "Your username and password didn't match. Try again, or ask an admin of your organisation "
    "for a password reset link."
)


class ThrottledAuthenticationForm(AuthenticationForm):
    """Django's login form, with failed logins counted per account and address; a locked-out
    login is refused before the password is hashed."""

    error_messages = {**AuthenticationForm.error_messages, "invalid_login": INVALID_LOGIN}
    lockout: throttle.Lockout | None = None

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return self.cleaned_data
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        self.lockout = throttle.lockout(username, address)
        if self.lockout is not None:
            raise ValidationError(self.lockout.message(), code="throttled")
        self.user_cache = authenticate(self.request, username=username, password=password)
        if self.user_cache is None:
            throttle.failed(username, address)
            raise self.get_invalid_login_error()
        throttle.succeeded(username)
        self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class LoginView(auth_views.LoginView):
    form_class = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.lockout is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.lockout.retry_after)
        return response


class PasswordSetView(auth_views.PasswordResetConfirmView):
    """Where an admin's reset link leads: set a new password (validated); the link then stops
    working, because the token is derived from the password it replaces."""

    template_name = "registration/password_set.html"
    success_url = reverse_lazy("login")
    post_reset_login = False

    def form_valid(self, form):
        response = super().form_valid(form)
        throttle.succeeded(form.user.get_username())
        messages.success(self.request, "Your new password is set: log in with it.")
        return response


def _resettable(membership: Membership, username: str) -> Membership:
    """The member `membership`'s admin may reset, else why not (404 for non-members)."""
    member = (
        membership.organization.memberships.select_related("user")
        .filter(user__username=username)
        .first()
    )
    if member is None:
        raise Http404(f"{username[:150]!r} is not a member of {membership.organization}.")
    user = member.user
    if user == membership.user:
        raise PermissionDenied("To change your own password use Change password (top right).")
    if user.is_superuser or user.is_staff:
        raise PermissionDenied(
            f"{user} is an operator account; the operator resets it with "
            "`manage.py changepassword`."
        )
    # An admin here must not take over what the member may do elsewhere.
    elsewhere = Membership.objects.filter(user=user).exclude(
        organization__in=Membership.objects.filter(user=membership.user, role=Role.ADMIN).values(
            "organization"
        )
    )
    if elsewhere.exists():
        raise PermissionDenied(
            f"{user} is also a member of organisations you do not administer; an admin of "
            "each of them, or the operator (`manage.py changepassword`), must reset it."
        )
    return member


@never_cache
@require_POST
def reset_link(request: HttpRequest, username: str) -> HttpResponse:
    """An admin asks for a member's one-time password link; it is shown once, on the members
    page this redirects to (a reload there makes no second link)."""
    membership = require(request.membership, "admin", "members")
    user = _resettable(membership, username).user
    path = reverse(
        "password-set",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": default_token_generator.make_token(user),
        },
    )
    until = timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT)
    flash_secret(
        request,
        f"A password link for {user.get_username()}. Send it to them yourself: it sets a new "
        f"password once, until {until:%Y-%m-%d %H:%M} UTC; their current password keeps "
        "working until then.",
        request.build_absolute_uri(path),
    )
    return redirect("accesspolicies:members")
