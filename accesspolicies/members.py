"""Members: admins invite people with a one-time link, change roles and remove members; the
organisation always keeps an admin. The link says nothing about who has an account elsewhere."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone

from accesspolicies import audit, limits, validators
from accesspolicies.access import require
from accesspolicies.models import SECRET_HASH, Invitation, Membership, Organization, Role
from accesspolicies.problems import Invalid, searchable, show
from accesspolicies.secrets import INVITATION

WHAT = "members"
DEFAULT_INVITE_DAYS = 7
MAX_INVITE_DAYS = 30


def _admin(org: Organization, actor: Membership) -> None:
    require(actor, "admin", WHAT)
    if actor.organization_id != org.pk:
        raise Http404("No such organisation.")


def member_named(actor: Membership, username: str) -> Membership:
    require(actor, "view", WHAT)
    member = None
    if searchable(username):
        found = actor.organization.memberships.select_related("user")
        member = found.filter(user__username=username).first()
    if member is None:
        raise Http404(f"{show(username)} is not a member of {actor.organization}.")
    return member


def _role(value: object) -> str:
    if value not in Role.values:
        raise Invalid(
            "role", f"{show(value)} is not a role; accepts {', '.join(Role.values)}. Pick one."
        )
    return str(value)


# --- invitations ---------------------------------------------------------------------------


def invite(
    org: Organization,
    role: object,
    note: object = "",
    expires_in_days: object = DEFAULT_INVITE_DAYS,
    *,
    actor: Membership,
) -> tuple[Invitation, str]:
    """A one-time invitation; the plain token (the link's last part) is returned once."""
    _admin(org, actor)
    role = _role(role)
    note = (note or "").strip() if isinstance(note, str) else ""
    if len(note) > 200:
        raise Invalid("note", f"{len(note)} characters; accepts at most 200. Shorten it.")
    days = limits.bounded_int("expiresInDays", expires_in_days, 1, MAX_INVITE_DAYS, "days")
    lookup, plain, digest = INVITATION.mint()
    invitation = Invitation.objects.create(
        organization=org,
        role=role,
        note=note,
        lookup=lookup,
        secret_hash=digest,
        created_by=actor.user,
        expires_at=timezone.now() + timedelta(days=days or DEFAULT_INVITE_DAYS),
    )
    audit.record(
        org, actor.user, "invitation.create", "invitation", lookup, {"role": role, "note": note}
    )
    return invitation, plain


def find_invitation(presented: str) -> Invitation | None:
    """The invitation `presented` is, whatever its state; unknown and wrong look the same."""
    invitations = Invitation.objects.select_related("organization")
    return INVITATION.recognise(
        presented, lambda lookup: invitations.filter(lookup=lookup).first(), SECRET_HASH
    )


def why_unusable(invitation: Invitation | None) -> str | None:
    """Why the link cannot be used, or None when it can."""
    if invitation is None:
        return "This invitation link is not valid. Ask an admin of the organisation for a new one."
    if invitation.revoked_at is not None:
        return "This invitation was withdrawn. Ask an admin of the organisation for a new one."
    if invitation.accepted_at is not None:
        return "This invitation was used already; each link works once. Ask for a new one."
    if invitation.expires_at <= timezone.now():
        return "This invitation has expired. Ask an admin of the organisation for a new one."
    return None


def _join(invitation_pk: int, user) -> Membership:
    """Use the invitation for `user`, once: the row is locked so two clicks cannot both join."""
    invitation = Invitation.objects.select_for_update().get(pk=invitation_pk)
    problem = why_unusable(invitation)
    if problem:
        raise Invalid("invitation", problem, status=410)
    org = invitation.organization
    if org.memberships.filter(user=user).exists():
        raise Invalid(
            "invitation",
            f"You are a member of {org} already; the invitation stays unused for someone else.",
            status=409,
        )
    membership = Membership.objects.create(organization=org, user=user, role=invitation.role)
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit.record(org, user, "member.join", "member", user.get_username(), {"role": invitation.role})
    return membership


def accept(presented: str, user) -> Membership:
    """A logged-in person joins through the link."""
    invitation = find_invitation(presented)
    if invitation is None:
        raise Invalid("invitation", why_unusable(None), status=404)
    with transaction.atomic():
        return _join(invitation.pk, user)


def _username(value: object) -> str:
    text = value.strip() if isinstance(value, str) else ""
    try:
        validators.validate_username(text)
    except ValidationError:
        raise Invalid(
            "username",
            f"{show(value)} is not a username; {validators.USERNAME_RULE}. Choose one like that.",
        ) from None
    return text


def sign_up(presented: str, username: object, password: object):
    """A new person makes an account through the link and joins. A username someone else has
    is refused with the same words as a reserved one: the answer tells nothing about who
    else has an account."""
    invitation = find_invitation(presented)
    problem = why_unusable(invitation)
    if problem:
        raise Invalid("invitation", problem, status=404 if invitation is None else 410)
    username = _username(username)
    if not isinstance(password, str) or not password:
        raise Invalid("password", "required; choose a password.")
    User = get_user_model()
    weak = validators.password_problems(password, User(username=username))
    if weak:
        raise Invalid("password", " ".join(weak))
    taken = Invalid("username", "cannot be used; choose another username.")
    try:
        with transaction.atomic():
            if User.objects.filter(username__iexact=username).exists():
                raise taken
            user = User.objects.create_user(username=username, password=password)
            _join(invitation.pk, user)
    except IntegrityError:
        raise taken from None
    return user


def withdraw(invitation: Invitation, *, actor: Membership) -> None:
    _admin(invitation.organization, actor)
    if invitation.accepted_at is None and invitation.revoked_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit.record(
            invitation.organization,
            actor.user,
            "invitation.withdraw",
            "invitation",
            invitation.lookup,
        )


def pending_invitations(actor: Membership):
    require(actor, "admin", WHAT)
    return actor.organization.invitations.filter(
        accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
    )


def get_invitation(actor: Membership, lookup: str) -> Invitation:
    require(actor, "admin", WHAT)
    found = None
    if searchable(lookup):
        found = actor.organization.invitations.filter(lookup=lookup).first()
    if found is None:
        raise Http404(f"{actor.organization} has no invitation {show(lookup)}.")
    return found


# --- roles -----------------------------------------------------------------------------------


def change_role(member: Membership, role: object, *, actor: Membership) -> None:
    _admin(member.organization, actor)
    role = _role(role)
    before = member.role
    # MembershipError when the member is the last admin: the caller shows it.
    member.organization.change_role(member, role)
    audit.record(
        member.organization,
        actor.user,
        "member.role",
        "member",
        member.user.get_username(),
        {"from": before, "to": role},
    )


def remove(member: Membership, *, actor: Membership) -> None:
    _admin(member.organization, actor)
    member.organization.remove_member(member)
    audit.record(
        member.organization, actor.user, "member.remove", "member", member.user.get_username()
    )
