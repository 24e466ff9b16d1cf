"""Logging in (throttled, and audited: each login and each failed one is in the audit log of
every organisation the account is a member of), changing one's own password, and an admin's
one-time reset link.

An admin's link may set a member's password only while that admin may reset it: the rule is
checked when the link is made and again each time it is used (the member may have joined an
organisation the admin does not run, or the admin lost the role since). Making, using and a
refused use of a link are in the audit log; the link itself never is.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.encoding import force_bytes
from django.utils.http import base36_to_int, int_to_base36, urlsafe_base64_encode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies import audit, throttle
from accesspolicies.access import require
from accesspolicies.models import Membership, Role
from accesspolicies.shown_once import flash_secret

logger = logging.getLogger(__name__)

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
            _failed_login(username, address)
            raise self.get_invalid_login_error()
        throttle.succeeded(username)
        self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


def _in_every_organisation(user, action: str, actor, actor_name: str | None = None) -> None:
    for membership in Membership.objects.filter(user=user).select_related("organization"):
        audit.record(
            membership.organization,
            actor,
            action,
            "member",
            user.get_username(),
            actor_name=actor_name,
        )


def _failed_login(username: str, address: str) -> None:
    """A wrong password (or an inactive account) for an account is in its organisations' audit
    logs; a name that is no account only in the process's log, without the name (people type
    passwords into the username field). The throttle bounds how many a window writes."""
    users = get_user_model()._default_manager
    user = users.filter(**{users.model.USERNAME_FIELD: username}).first()
    if user is None:
        logger.info("a failed login for an account that does not exist, from %s", address or "?")
        return
    _in_every_organisation(user, "member.login-failed", None, "anonymous (a failed login)")


class LoginView(auth_views.LoginView):
    form_class = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def form_valid(self, form):
        response = super().form_valid(form)
        _in_every_organisation(form.get_user(), "member.login", form.get_user())
        return response

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.lockout is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.lockout.retry_after)
        return response


class _IssuedBy(PasswordResetTokenGenerator):
    """Django's reset token (it stops working once the password changes, and after
    PASSWORD_RESET_TIMEOUT), with the membership that made the link bound into its hash."""

    key_salt = "servedeck.accesspolicies.passwords.link"

    def __init__(self, issuer_pk: int) -> None:
        super().__init__()
        self.issuer_pk = issuer_pk

    def _make_hash_value(self, user, timestamp: int) -> str:
        return f"{super()._make_hash_value(user, timestamp)}|{self.issuer_pk}"


def link_token(issuer: Membership, user) -> str:
    """The token of a link `issuer` makes for `user`: <issuer>-<timestamp>-<hash>."""
    return f"{int_to_base36(issuer.pk)}-{_IssuedBy(issuer.pk).make_token(user)}"


def link_issuer(user, token: object) -> Membership | None:
    """The membership that made the link `token` for `user`, when the token is whole, not used
    and not expired; None otherwise (a forged maker fails the hash)."""
    if not isinstance(token, str) or token.count("-") != 2:
        return None
    issuer_part, _, rest = token.partition("-")
    try:
        issuer_pk = base36_to_int(issuer_part)
    except ValueError:
        return None
    if not _IssuedBy(issuer_pk).check_token(user, rest):
        return None
    return Membership.objects.select_related("organization", "user").filter(pk=issuer_pk).first()


class LinkCheck:
    """The token check of one request to a link (PasswordSetView.token_generator): the token
    is valid and its maker may still reset the member's password. Keeps the maker, and why a
    use is refused."""

    def __init__(self) -> None:
        self.issuer: Membership | None = None
        self.refusal: str | None = None

    def check_token(self, user, token) -> bool:
        self.issuer, self.refusal = link_issuer(user, token), None
        if self.issuer is None:
            return False
        self.refusal = reset_refusal(self.issuer, user, you=self.issuer.user.get_username())
        return self.refusal is None


@method_decorator(login_not_required, name="dispatch")  # as Django's: dispatch is overridden
class PasswordSetView(auth_views.PasswordResetConfirmView):
    """Where an admin's reset link leads: set a new password (validated); the link then stops
    working, because the token is derived from the password it replaces. Each request checks
    again that the link's maker may reset this member (LinkCheck)."""

    template_name = "registration/password_set.html"
    success_url = reverse_lazy("login")
    post_reset_login = False

    def setup(self, request, *args, **kwargs):
        super().setup(request, *args, **kwargs)
        self.token_generator = LinkCheck()

    def dispatch(self, *args, **kwargs):
        response = super().dispatch(*args, **kwargs)
        check = self.token_generator
        if check.refusal is not None and check.issuer is not None:
            audit.record(
                check.issuer.organization,
                None,
                "member.password-link-refused",
                "member",
                self.user.get_username(),
                {"linkBy": check.issuer.user.get_username(), "why": check.refusal},
                actor_name="anonymous (a password link)",
            )
        return response

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["refusal"] = self.token_generator.refusal
        return context

    def form_valid(self, form):
        issuer = self.token_generator.issuer
        response = super().form_valid(form)
        user = form.user
        throttle.succeeded(user.get_username())
        audit.record(
            issuer.organization,
            user,
            "member.password-set",
            "member",
            user.get_username(),
            {"linkBy": issuer.user.get_username()},
        )
        messages.success(self.request, "Your new password is set: log in with it.")
        return response


def _member(admin: Membership, username: str) -> Membership:
    """The member `username` of the admin's organisation (404 for non-members)."""
    member = (
        admin.organization.memberships.select_related("user").filter(user__username=username)
    ).first()
    if member is None:
        raise Http404(f"{username[:150]!r} is not a member of {admin.organization}.")
    return member


def reset_refusal(admin: Membership, user, you: str = "you") -> str | None:
    """Why `admin` may not reset `user`'s password, or None when they may: asked when the link
    is made (told to the admin, `you`), and again whenever it is used."""
    # A deactivated admin's links die with their account, as their sessions do.
    if not admin.user.is_active:
        return f"{admin.user} is deactivated; links they made no longer work."
    if not admin.may("admin"):
        return f"{admin.user} is no longer an admin of {admin.organization}."
    if user == admin.user:
        return "To change your own password use Change password (top right)."
    if not admin.organization.memberships.filter(user=user).exists():
        return f"{user} is no longer a member of {admin.organization}."
    if user.is_superuser or user.is_staff:
        return (
            f"{user} is an operator account; the operator resets it with "
            "`manage.py changepassword`."
        )
    # An admin here must not take over what the member may do elsewhere.
    does = "do" if you == "you" else "does"
    elsewhere = Membership.objects.filter(user=user).exclude(
        organization__in=Membership.objects.filter(user=admin.user, role=Role.ADMIN).values(
            "organization"
        )
    )
    if elsewhere.exists():
        return (
            f"{user} is also a member of organisations {you} {does} not administer; an admin of "
            "each of them, or the operator (`manage.py changepassword`), must reset it."
        )
    return None


@never_cache
@require_POST
def reset_link(request: HttpRequest, username: str) -> HttpResponse:
    """An admin asks for a member's one-time password link; it is shown once, on the members
    page this redirects to (a reload there makes no second link)."""
    membership = require(request.membership, "admin", "members")
    user = _member(membership, username).user
    refusal = reset_refusal(membership, user)
    if refusal is not None:
        raise PermissionDenied(refusal)
    path = reverse(
        "password-set",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": link_token(membership, user),
        },
    )
    until = timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT)
    audit.record(
        membership.organization,
        request.user,
        "member.password-link",
        "member",
        user.get_username(),
        {"until": f"{until:%Y-%m-%d %H:%M} UTC"},
    )
    flash_secret(
        request,
        f"A password link for {user.get_username()}. Send it to them yourself: it sets a new "
        f"password once, until {until:%Y-%m-%d %H:%M} UTC; their current password keeps "
        "working until then.",
        request.build_absolute_uri(path),
    )
    return redirect("accesspolicies:members")
