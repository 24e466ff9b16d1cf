"""The Kubernetes backend, layer by layer:

- backend.py: ClusterBackend, the backend interface (jobs/backends/base.py) on a cluster; one
  KServe client per cluster connection.
- kserve_client.py: KServeClient, an application's rendered objects on a KServe cluster
  (apply and prune, delete, restart, stop, observe, list and watch); cluster_objects.py: what
  its verbs return and its pure readings of objects (whose application and track, what an
  apply sends, which events concern an application).
- kube_api.py: the one place that calls the `kubernetes` client (KubeApi, ClusterConnection).
- errors.py: every failure in plain words; kinds.py: the Kinds ServeDeck renders and reads;
  owner.py: which organisation's application an object is; kubeconfig.py: the one file a
  cluster's kubeconfig may be.

Nothing is imported here: importing kinds or errors does not load the `kubernetes` client.
"""
