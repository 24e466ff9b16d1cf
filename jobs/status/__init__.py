"""An application's status on Kubernetes: derive.py holds the one `derive_status` (the
priority of findings and their reasons), readers.py the readers of raw objects into a typed
View and the explanations of what they find; machines.py `derive_vm_status`, the same for an
application in KubeVirt virtual machines."""

from jobs.status.derive import INTERNAL_ERROR, Status, derive_status
from jobs.status.machines import MachineFacts, derive_vm_status

__all__ = ["INTERNAL_ERROR", "MachineFacts", "Status", "derive_status", "derive_vm_status"]
