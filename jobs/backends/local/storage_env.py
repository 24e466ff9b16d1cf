"""The environment a bucket folder's download is read with (s3://, gs://, Azure Blob): which
variables the runner gives a replica's download launcher besides the allowed environment, made
from the profile's storage credentials (jobs.storage_access.Credentials), and which the launcher
takes out before it execs the runtime. Standard library only: download_launcher.py imports it
without Django.
"""

from __future__ import annotations

import os

try:
    from . import download_files
except ImportError:  # imported by the launcher run by path: this file's folder is on sys.path
    import download_files  # type: ignore[no-redef]


# What the runner gives the launcher of a bucket folder's download besides the allowed
# environment, and what the launcher takes out before it execs the runtime: the storage
# credentials, and the operator's settings of the console's host for that storage (endpoint,
# region, CA bundle, the chain's files when the profile reads with this machine's credentials).
S3_UNSIGNED = "SERVEDECK_S3_UNSIGNED"
S3_SETTINGS = (
    "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_CA_BUNDLE", "AWS_EC2_METADATA_DISABLED", "AWS_USE_FIPS_ENDPOINT",
)  # fmt: skip
S3_CHAIN = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
)  # fmt: skip
S3_ENV = (S3_UNSIGNED, *S3_SETTINGS, *S3_CHAIN)
GCS_ANONYMOUS = "SERVEDECK_GCS_ANONYMOUS"
GCS_SETTINGS = ("STORAGE_EMULATOR_HOST",)
# Application Default Credentials: the key file, gcloud's folder, the metadata server.
GCS_CHAIN = (
    "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG",
    "GCE_METADATA_HOST", "GCE_METADATA_IP",
)  # fmt: skip
GCS_ENV = (GCS_ANONYMOUS, *GCS_SETTINGS, *GCS_CHAIN)
# Azure Blob: the operator's endpoint (a URL with {account} in it), and the profile's Shared Key.
AZURE_ANONYMOUS = "SERVEDECK_AZURE_ANONYMOUS"
AZURE_ENDPOINT = "SERVEDECK_AZURE_BLOB_ENDPOINT"
AZURE_ACCOUNT, AZURE_KEY = "SERVEDECK_AZURE_ACCOUNT_NAME", "SERVEDECK_AZURE_ACCOUNT_KEY"
AZURE_ENV = (AZURE_ANONYMOUS, AZURE_ENDPOINT, AZURE_ACCOUNT, AZURE_KEY)
STORAGE_ENV = (*S3_ENV, *GCS_ENV, *AZURE_ENV)


def s3_environment(console_env, credentials) -> dict[str, str]:
    """The variables the launcher reads an S3 folder with (jobs.storage_access.Credentials:
    anonymous, keys, or this machine's chain)."""
    env = {k: console_env[k] for k in S3_SETTINGS if console_env.get(k)}
    # Never a file of this machine's unless the profile reads with its chain.
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    if credentials.kind == "machine":
        env.update({k: console_env[k] for k in S3_CHAIN if console_env.get(k)})
    elif credentials.kind == "keys":
        env["AWS_ACCESS_KEY_ID"] = credentials.access_key_id
        env["AWS_SECRET_ACCESS_KEY"] = credentials.secret_access_key
        if credentials.session_token:
            env["AWS_SESSION_TOKEN"] = credentials.session_token
    else:
        env[S3_UNSIGNED] = "1"
    return env


def gcs_environment(console_env, credentials) -> dict[str, str]:
    """The variables the launcher reads a GCS folder with: anonymous, or this machine's
    Application Default Credentials (`machine`); raises ValueError for an access key pair,
    which reads S3 only (gcs_reads refuses it at apply the same way)."""
    env = {k: console_env[k] for k in GCS_SETTINGS if console_env.get(k)}
    if credentials.kind == "machine":
        env.update({k: console_env[k] for k in GCS_CHAIN if console_env.get(k)})
    elif credentials.kind == "keys":
        raise ValueError(
            "the profile's storageCredentials are an access key pair (env/<PREFIX>), which "
            "reads S3 only; gs:// is read anonymously or with machine"
        )
    else:
        env[GCS_ANONYMOUS] = "1"
    return env


def azure_environment(console_env, credentials) -> dict[str, str]:
    """The variables the launcher reads an Azure Blob folder with: anonymous, or the
    profile's Shared Key (`env/<PREFIX>`: the account's name and key); raises ValueError for
    `machine`, which is not read for Azure Blob (azure_reads refuses it at apply the same way)."""
    env = {k: console_env[k] for k in (AZURE_ENDPOINT,) if console_env.get(k)}
    if credentials.kind == "keys":
        env[AZURE_ACCOUNT] = credentials.access_key_id
        env[AZURE_KEY] = credentials.secret_access_key
    elif credentials.kind == "machine":
        raise ValueError(
            "the profile's storageCredentials are machine, which is not read for Azure Blob; "
            "use env/<PREFIX> (the storage account's name and key)"
        )
    else:
        env[AZURE_ANONYMOUS] = "1"
    return env


STORAGE_ENVIRONMENT = {
    download_files.S3: s3_environment,
    download_files.GS: gcs_environment,
    download_files.AZ: azure_environment,
}


def storage_environment(repo: str, console_env, credentials) -> dict[str, str]:
    """The variables the launcher reads the bucket folder `repo` with (its scheme's)."""
    scheme = download_files.bucket_scheme(repo)
    if scheme is None:
        raise ValueError(f"{repo[:100]!r} is not a bucket folder")
    return STORAGE_ENVIRONMENT[scheme](console_env, credentials)
