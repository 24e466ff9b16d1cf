"""Who may do what: organisations, their members and roles, and personal access tokens."""

from datetime import timedelta
from operator import attrgetter
from secrets import token_hex

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from accesspolicies.scope import MemberQuerySet
from accesspolicies.secrets import API_KEY, LOOKUP_LENGTH, PERSONAL_TOKEN


class MembershipError(Exception):
    """A change to the members that would leave the organisation broken; says what to do."""


class Organization(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Variables of the console's environment that this organisation's profiles may name as
    # `env/VAR` token references; only the operator sets them (never a member).
    token_variables = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def _ensure_an_admin_remains(self, leaving: "Membership") -> None:
        """Call inside a transaction: the organisation's admin memberships are locked until it
        ends, so two admins demoting each other at once cannot both see the other one stay."""
        admins = list(
            self.memberships.select_for_update()
            .filter(role=Role.ADMIN)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if admins == [leaving.pk]:
            raise MembershipError(
                f"{leaving.user} is the last admin of {self}; make another member admin first."
            )

    def change_role(self, membership: "Membership", role: str) -> None:
        with transaction.atomic():
            if role != Role.ADMIN:
                self._ensure_an_admin_remains(membership)
            membership.role = role
            membership.save(update_fields=["role"])

    def remove_member(self, membership: "Membership") -> None:
        """Remove a member; their tokens for this organisation stop working with them."""
        with transaction.atomic():
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


SECRET_HASH = attrgetter("secret_hash")  # where each kind's row keeps its stored digest
# last_used is written at most this often, so that a busy token does not write on every call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class PersonalAccessTokenQuerySet(MemberQuerySet):
    """A member sees their own tokens in the organisation, nobody else's."""

    what = "tokens"

    def scoped(self, membership) -> MemberQuerySet:
        return self.filter(user=membership.user, organization=membership.organization)

    def not_found(self, membership, shown: str) -> str:
        return f"You have no token named {shown} in {membership.organization}."

    def authenticate(self, presented: str) -> "PersonalAccessToken | None":
        """The live token that `presented` is, or None; unknown and wrong look the same."""
        candidates = self.select_related("user", "organization").filter(user__is_active=True)
        token = PERSONAL_TOKEN.recognise(
            presented, lambda lookup: candidates.filter(lookup=lookup).first(), SECRET_HASH
        )
        if token is None or not token.is_live():
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
        lookup, plain, digest = PERSONAL_TOKEN.mint()
        token = cls.objects.create(
            user=user,
            organization=organization,
            name=name,
            lookup=lookup,
            secret_hash=digest,
            expires_at=expires_at,
        )
        return token, plain

    @property
    def masked(self) -> str:
        return PERSONAL_TOKEN.masked(self.lookup)

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


# --- Callers of the gateway: API keys, access policies, verified domains -------------------


class APIKeyQuerySet(MemberQuerySet):
    """Keys are an admin's business, even to learn which names exist: the key, its usage and
    the policies that name it are read through this one rule."""

    what = "API keys"
    view_action = "admin"

    def not_found(self, membership, shown: str) -> str:
        return f"{membership.organization} has no API key named {shown}."

    def live(self):
        """Keys that are neither revoked nor expired (a rotated key's old secret is separate)."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class APIKey(models.Model):
    """A caller's key for the gateway (`/v1`), made by an admin; only its hash is stored.

    Rotation keeps one row per named caller: the new secret takes `lookup`/`secret_hash`, the
    old one moves to `previous_*` and keeps working until `previous_expires_at`.
    """

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100, help_text="Who calls with it, e.g. support-bot.")
    lookup = models.CharField(max_length=LOOKUP_LENGTH, unique=True)
    secret_hash = models.CharField(max_length=64)
    previous_lookup = models.CharField(max_length=LOOKUP_LENGTH, blank=True, db_index=True)
    previous_secret_hash = models.CharField(max_length=64, blank=True)
    previous_expires_at = models.DateTimeField(null=True, blank=True)
    # Application names (the `model` ids); empty with all_applications=False calls nothing.
    all_applications = models.BooleanField(default=True)
    applications = models.JSONField(default=list, blank=True)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = APIKeyQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="api_key_name_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"

    @property
    def masked(self) -> str:
        return API_KEY.masked(self.lookup)


class AccessPolicyQuerySet(MemberQuerySet):
    what = "access policies"
    view_action = "admin"

    def not_found(self, membership, shown: str) -> str:
        return f"{membership.organization} has no access policy named {shown}."


class AccessPolicy(models.Model):
    """What `spec.access.accessPolicy` names: which keys may call, with what limits, from where."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="access_policies"
    )
    name = models.CharField(max_length=63)
    all_keys = models.BooleanField(default=True, help_text="Every key of the organisation.")
    keys = models.ManyToManyField(APIKey, blank=True, related_name="policies")
    # Per-caller limits that override the key's own when set.
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    allowed_networks = models.JSONField(
        default=list, blank=True, help_text="Client networks (CIDRs); empty allows any."
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = AccessPolicyQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "access policies"
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="policy_name_per_org")
        ]

    def __str__(self) -> str:
        return self.name


class VerifiedDomainQuerySet(MemberQuerySet):
    what = "domains"
    lookup_field = "domain"
    view_action = "admin"

    def not_found(self, membership, shown: str) -> str:
        return f"{membership.organization} has no domain {shown}."


class VerifiedDomain(models.Model):
    """A domain an organisation proved it controls with a DNS TXT record; Domain exposure
    uses only verified ones. A domain is verified for at most one organisation."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="domains")
    domain = models.CharField(max_length=253)
    challenge = models.CharField(max_length=64, default=token_hex)
    created_at = models.DateTimeField(default=timezone.now)
    verified_at = models.DateTimeField(null=True, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    objects = VerifiedDomainQuerySet.as_manager()

    class Meta:
        ordering = ["domain"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "domain"], name="domain_per_org"),
            models.UniqueConstraint(
                fields=["domain"],
                condition=models.Q(verified_at__isnull=False),
                name="domain_verified_once",
            ),
        ]

    def __str__(self) -> str:
        return self.domain


class Invitation(models.Model):
    """A one-time link an admin hands over; whoever opens it joins in `role` (once)."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="invitations"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    note = models.CharField(max_length=200, blank=True, help_text="Who it is for.")
    lookup = models.CharField(max_length=LOOKUP_LENGTH, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation {self.lookup} to {self.organization} as {self.role}"


class AuditEntryQuerySet(MemberQuerySet):
    what = "the audit log"
    view_action = "admin"


class AuditEntry(models.Model):
    """A change to keys, policies, domains, members, applications, clusters or profiles, a
    login (or a failed one) or a password link: who, what, when, where."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="audit_entries"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept if the user goes.")
    action = models.CharField(max_length=64, help_text="e.g. apikey.create, application.delete")
    object_type = models.CharField(max_length=32)
    object_name = models.CharField(max_length=200)
    detail = models.JSONField(default=dict, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.object_name}"


class ChangeCounter(models.Model):
    """A number bumped on every change the gateway caches (keys, policies, domains, routes):
    each gateway process reads it once a second and reloads when it moved, with or without
    Redis."""

    name = models.CharField(max_length=32, primary_key=True)
    value = models.BigIntegerField(default=0)

    GATEWAY = "gateway"

    def __str__(self) -> str:
        return f"{self.name}={self.value}"

    @classmethod
    def bump(cls, name: str = GATEWAY) -> None:
        updated = cls.objects.filter(name=name).update(value=models.F("value") + 1)
        if not updated:
            cls.objects.get_or_create(name=name, defaults={"value": 1})

    @classmethod
    def read(cls, name: str = GATEWAY) -> int:
        row = cls.objects.filter(name=name).values_list("value", flat=True).first()
        return row or 0
