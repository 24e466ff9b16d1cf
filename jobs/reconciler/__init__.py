"""The reconciler: reconciler.py loops over the clusters (local processes polled, Kubernetes
clusters followed); watching.py follows one Kubernetes cluster through namespaced watches."""

from jobs.reconciler.reconciler import Reconciler

__all__ = ["Reconciler"]
