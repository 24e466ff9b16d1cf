"""The kubeconfig folder rule: a cluster reaches Kubernetes through one regular file inside
SERVEDECK_KUBECONFIG_DIR, never any other file of the console's host.

One decision, made twice: when the cluster is saved (the form, for a clear field error) and
where the value is used (the client set-up), so a row written any other way cannot slip by.
Pure apart from reading the file system; imports nothing of the `kubernetes` client.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SHOWN_CHARACTERS = 200  # a path is echoed back at most this long


class KubeconfigRefused(ValueError):
    """The path cannot be used; the message says why and what to give instead."""


def _shown(path: str) -> str:
    return repr(path if len(path) <= SHOWN_CHARACTERS else path[:SHOWN_CHARACTERS] + "…")


def resolve_kubeconfig(path: str, folder: Path | str) -> str:
    """The real path of the one kubeconfig file `path` names inside `folder` (a relative path
    is taken from the folder). Raises KubeconfigRefused, naming the value and the fix."""
    folder_real = os.path.realpath(folder)
    fix = f"Give the path of one kubeconfig file in {folder_real} (an operator puts it there)."
    if not isinstance(path, str) or not path.strip():
        raise KubeconfigRefused(f"No kubeconfig path is given. {fix}")
    if os.pathsep in path:
        # The client reads "a:b" as a list of files and merges them: one would be ours, the
        # other any file of the host.
        raise KubeconfigRefused(
            f"The kubeconfig path {_shown(path)} holds {os.pathsep!r}, which the Kubernetes "
            f"client reads as a list of files. {fix}"
        )
    if path.startswith("~"):
        raise KubeconfigRefused(
            f"The kubeconfig path {_shown(path)} starts with '~', a home folder of the console's "
            f"host. {fix}"
        )
    if "\x00" in path:
        raise KubeconfigRefused(f"The kubeconfig path {_shown(path)} holds a NUL byte. {fix}")
    real = os.path.realpath(os.path.join(folder_real, path))
    if os.path.commonpath([real, folder_real]) != folder_real or real == folder_real:
        raise KubeconfigRefused(f"The kubeconfig path {_shown(path)} is outside the folder. {fix}")
    if os.pathsep in real:  # the folder itself is named with one: the client would split it
        raise KubeconfigRefused(
            f"The kubeconfig folder {folder_real!r} holds {os.pathsep!r}, which the Kubernetes "
            "client reads as a list of files; set SERVEDECK_KUBECONFIG_DIR to a folder without it."
        )
    try:
        mode = os.stat(real).st_mode
    except OSError:
        raise KubeconfigRefused(
            f"The kubeconfig file {_shown(path)} does not exist. {fix}"
        ) from None
    if not stat.S_ISREG(mode):
        raise KubeconfigRefused(f"The kubeconfig path {_shown(path)} is not a regular file. {fix}")
    return real
