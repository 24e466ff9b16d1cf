"""Who may do what: organisations, their members and roles, and personal access tokens."""

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.utils import timezone


class MembershipError(Exception):
    """A change to the members that would leave the organisation broken; says what to do."""


class Organization(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def add_member(self, username: str, role: str) -> tuple["Membership", str | None]:
        """Add a user (created when new, with a password returned once) in `role`."""
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        password = None
        if user is None:
            password = secrets.token_urlsafe(12)
            user = User.objects.create_user(username=username, password=password)
        elif self.memberships.filter(user=user).exists():
            raise MembershipError(
                f"{username} is a member of {self} already; change their role instead."
            )
        return self.memberships.create(user=user, role=role), password

    def _ensure_an_admin_remains(self, leaving: "Membership") -> None:
        admins = self.memberships.filter(role=Role.ADMIN).exclude(pk=leaving.pk)
        if leaving.role == Role.ADMIN and not admins.exists():
            raise MembershipError(
                f"{leaving.user} is the last admin of {self}; make another member admin first."
            )

    def change_role(self, membership: "Membership", role: str) -> None:
        if role != Role.ADMIN:
            self._ensure_an_admin_remains(membership)
        membership.role = role
        membership.save(update_fields=["role"])

    def remove_member(self, membership: "Membership") -> None:
        """Remove a member; their tokens for this organisation stop working with them."""
        self._ensure_an_admin_remains(membership)
        self.access_tokens.filter(user=membership.user).delete()
        membership.delete()


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    DEPLOYER = "deployer", "Deployer"
    VIEWER = "viewer", "Viewer"


# What each role may do; a role includes nothing it does not list.
ROLE_ACTIONS = {
    Role.ADMIN: {"view", "deploy", "admin"},
    Role.DEPLOYER: {"view", "deploy"},
    Role.VIEWER: {"view"},
}


class Membership(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="one_membership_per_org")
        ]
        ordering = ["organization__name"]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"

    def may(self, action: str) -> bool:
        return action in ROLE_ACTIONS[Role(self.role)]


TOKEN_PREFIX = "sdp_"
LOOKUP_LENGTH = 12
# last_used is written at most this often, so that a busy token does not write on every call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class PersonalAccessTokenQuerySet(models.QuerySet):
    def authenticate(self, presented: str) -> "PersonalAccessToken | None":
        """The live token that `presented` is, or None; unknown and wrong look the same."""
        if not presented.startswith(TOKEN_PREFIX):
            return None
        lookup = presented[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + LOOKUP_LENGTH]
        token = (
            self.select_related("user", "organization")
            .filter(lookup=lookup, user__is_active=True)
            .first()
        )
        expected = token.secret_hash if token else _digest("no such token")
        if not hmac.compare_digest(expected, _digest(presented)) or token is None:
            return None
        if not token.is_live():
            return None
        token.touch()
        return token


class PersonalAccessToken(models.Model):
    """A member's token for the REST API and the command line; only its hash is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="access_tokens"
    )
    name = models.CharField(max_length=100)
    lookup = models.CharField(max_length=LOOKUP_LENGTH, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = PersonalAccessTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"

    @classmethod
    def issue(
        cls, user, organization, name: str, expires_at=None
    ) -> tuple["PersonalAccessToken", str]:
        """Create a token; the plain text is returned once and never stored."""
        lookup = secrets.token_hex(LOOKUP_LENGTH // 2)
        plain = f"{TOKEN_PREFIX}{lookup}{secrets.token_urlsafe(32)}"
        token = cls.objects.create(
            user=user,
            organization=organization,
            name=name,
            lookup=lookup,
            secret_hash=_digest(plain),
            expires_at=expires_at,
        )
        return token, plain

    @property
    def masked(self) -> str:
        return f"{TOKEN_PREFIX}{self.lookup}…"

    def is_live(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > LAST_USED_RESOLUTION:
            type(self).objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now
