"""An application's status on Kubernetes: derive.py holds the one `derive_status` (the
priority of findings and their reasons), readers.py the readers of raw objects into a typed
View and the explanations of what they find."""

from jobs.status.derive import INTERNAL_ERROR, Status, derive_status

__all__ = ["INTERNAL_ERROR", "Status", "derive_status"]
