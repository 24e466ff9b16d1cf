"""What a model's page shows besides its status: the facts of what is served (facts.py), the
code to call it (snippets.py), what changed between revisions (revision_diff.py), the runtime's
own metrics (serving_metrics.py) and its replicas' logs (replica_logs.py)."""
