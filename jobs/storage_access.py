"""How a profile reads private artifacts (s3://, gs://, Azure Blob, oci://), by reference only:
the cluster's own objects for KServe (a ServiceAccount, a storage Secret, an image pull Secret,
never their contents), and for the console itself (Check model; the local backend's downloads)
`env/<PREFIX>`, variables of the console's host that the operator allowed for the organisation
as for Hugging Face tokens (jobs.token_refs), or `machine`, this machine's own credentials chain,
only for organisations the operator named in SERVEDECK_MACHINE_CREDENTIALS.

Pure: the same rule where a reference is saved (the profile form) and where it is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jobs.token_refs import allowed_variables

# A Kubernetes object name (DNS-1123 subdomain): ServiceAccounts and Secrets.
OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
PREFIX = re.compile(r"[A-Z_][A-Z0-9_]{0,79}")
ENV_REF = re.compile(r"env/(?P<prefix>[A-Z_][A-Z0-9_]{0,79})")
MACHINE = "machine"
MACHINE_SETTING = "SERVEDECK_MACHINE_CREDENTIALS"
# What `env/<PREFIX>` reads: <PREFIX>_ACCESS_KEY_ID and <PREFIX>_SECRET_ACCESS_KEY, and
# <PREFIX>_SESSION_TOKEN when it is allowed too (`env/AWS` is the standard AWS_* names).
REQUIRED_SUFFIXES = ("_ACCESS_KEY_ID", "_SECRET_ACCESS_KEY")
OPTIONAL_SUFFIXES = ("_SESSION_TOKEN",)
SHOWN_CHARACTERS = 80

# The schemes each kind of access is for.
BUCKET_SCHEMES = ("s3", "gs", "https")  # https: Azure Blob, the only https:// the platform reads
IMAGE_SCHEMES = ("oci",)
# The profile fields, as the API, the command line and the audit log name them.
SERVICE_ACCOUNT_FIELD = "storageServiceAccount"
SECRET_FIELD = "storageSecret"
PULL_SECRET_FIELD = "imagePullSecret"
CREDENTIALS_FIELD = "storageCredentials"


def _shown(value: str) -> str:
    return repr(value if len(value) <= SHOWN_CHARACTERS else value[:SHOWN_CHARACTERS] + "…")


def object_name_problem(value: str, field_name: str) -> str | None:
    """Why `value` cannot be the name of the Kubernetes object `field_name` refers to."""
    if not value or OBJECT_NAME.fullmatch(value):
        return None
    return (
        f"{field_name}: {_shown(value)} is not a Kubernetes object name; use lowercase letters, "
        "digits, '-' and '.', starting and ending with a letter or digit (at most 253), the "
        "name of an object in the profile's namespace, never its contents."
    )


def machine_allowed(organization: str, allowed: Iterable[str]) -> bool:
    """Whether the operator lets `organization` use this machine's credentials chain
    (SERVEDECK_MACHINE_CREDENTIALS: organisation slugs, or `*` for every one)."""
    names = set(allowed)
    return "*" in names or organization in names


def credentials_problem(
    ref: str, variables: Iterable[str], organization: str, machine_orgs: Iterable[str]
) -> str | None:
    """Why a profile may not hold `ref` as its storage credentials; None when it may (empty:
    none, so only public artifacts are read)."""
    if not ref:
        return None
    if ref == MACHINE:
        if machine_allowed(organization, machine_orgs):
            return None
        return (
            f"{CREDENTIALS_FIELD}: machine (this machine's own credentials chain) is not allowed "
            f"for organisation {organization}; use env/<PREFIX>, or ask the operator to add "
            f"{organization} to {MACHINE_SETTING}."
        )
    env = ENV_REF.fullmatch(ref)
    if env is None:
        return (
            f"{CREDENTIALS_FIELD}: {_shown(ref)} is not a credentials reference; write "
            "env/<PREFIX> (the variables <PREFIX>_ACCESS_KEY_ID and <PREFIX>_SECRET_ACCESS_KEY "
            "of the console's host, allowed for this organisation) or machine (this machine's "
            "own credentials chain). Never paste a key."
        )
    names = allowed_variables(list(variables))
    missing = [env["prefix"] + s for s in REQUIRED_SUFFIXES if env["prefix"] + s not in names]
    if missing:
        listed = ", ".join(sorted(names)) or "none"
        allow = "; ".join(
            f"`manage.py organization allow-token-variable {organization} {name}`"
            for name in missing
        )
        return (
            f"{CREDENTIALS_FIELD}: {ref} reads {', '.join(missing)}, which the operator has not "
            f"allowed for organisation {organization} (allowed: {listed}). Ask the operator to "
            f"run {allow}."
        )
    return None


@dataclass(frozen=True)
class Credentials:
    """What the console reads an artifact with: `anonymous` (unsigned requests), `keys` (an
    access key pair read from allowed variables) or `machine` (the SDK's own chain). The values
    never show in a repr, a log line or a cache key."""

    kind: str = "anonymous"
    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)

    @property
    def anonymous(self) -> bool:
        return self.kind == "anonymous"


ANONYMOUS = Credentials()


def credentials(
    ref: str,
    variables: Iterable[str],
    environ: Mapping[str, str],
    organization: str,
    machine_orgs: Iterable[str],
) -> Credentials | None:
    """The credentials `ref` names, checked again at the time of use: ANONYMOUS for none;
    None when the reference is not allowed (any more) or its variables are not set."""
    if not ref:
        return ANONYMOUS
    if credentials_problem(ref, variables, organization, machine_orgs) is not None:
        return None
    if ref == MACHINE:
        return Credentials(MACHINE)
    prefix = ENV_REF.fullmatch(ref)["prefix"]  # type: ignore[index]
    key_id = environ.get(prefix + REQUIRED_SUFFIXES[0]) or ""
    secret = environ.get(prefix + REQUIRED_SUFFIXES[1]) or ""
    if not key_id or not secret:
        return None
    token_name = prefix + OPTIONAL_SUFFIXES[0]
    allowed = allowed_variables(list(variables))
    token = (environ.get(token_name) or "") if token_name in allowed else ""
    return Credentials("keys", key_id, secret, token)


def profile_credentials(profile, machine_orgs: Iterable[str]) -> Credentials | None:
    """What a profile's storageCredentials name, read from this process's environment at each
    use (as token_refs.profile_token), so taking a variable or the machine's chain back takes
    effect at once; None when the reference is not allowed any more, or its variables are
    not set."""
    org = profile.organization
    return credentials(
        profile.storage_credentials_ref or "",
        org.token_variables or [],
        os.environ,
        org.slug,
        machine_orgs,
    )


def credentials_unusable(profile_name: str, ref: str) -> str:
    """Why a profile's storage credentials cannot be used now (profile_credentials gave
    None), and what to do."""
    return (
        f"profile {profile_name}'s {CREDENTIALS_FIELD} {_shown(ref)} cannot be used: the "
        "operator no longer allows it for the organisation, or its variables are not set on "
        "the console's host. Ask the operator, or set the profile's storageCredentials again."
    )


@dataclass(frozen=True)
class ClusterAccess:
    """A Kubernetes profile's references to its cluster's objects (names only)."""

    service_account: str = ""
    storage_secret: str = ""
    image_pull_secret: str = ""

    def reads_buckets(self) -> bool:
        return bool(self.service_account or self.storage_secret)

    def reads_images(self) -> bool:
        return bool(self.image_pull_secret or self.service_account)

    @classmethod
    def of(cls, profile) -> ClusterAccess:
        return cls(
            profile.storage_service_account or "",
            profile.storage_secret or "",
            profile.image_pull_secret or "",
        )


def cluster_access_refusal(scheme: str, access: ClusterAccess, profile: str) -> str | None:
    """Why the cluster cannot read a private artifact of `scheme` with what profile `profile`
    gives it; None when it has something to read it with (or the scheme needs nothing)."""
    if scheme in BUCKET_SCHEMES and not access.reads_buckets():
        return (
            f"the artifact is private and profile {profile} gives the cluster nothing to read "
            f"it with: set the profile's {SERVICE_ACCOUNT_FIELD} (a ServiceAccount in its "
            f"namespace whose secrets hold the storage credentials, or bound to a cloud role) "
            f"or {SECRET_FIELD} (KServe's storage Secret), then Deploy again."
        )
    return None
