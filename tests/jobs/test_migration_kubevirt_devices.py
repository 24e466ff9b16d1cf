"""Migration 0009: KubeVirt's permitted devices become unknown (None) where an empty list
could not tell "permits none" from "never read" (a refused read of the KubeVirt CR, or a
cluster discovered before the field existed); a list that names devices is kept."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("jobs", "0008_application_runtime")]
AFTER = [("jobs", "0009_cluster_kubevirt_devices_unknown")]


@pytest.mark.django_db(transaction=True)
def test_an_empty_device_list_becomes_unknown_and_a_read_one_stays():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps
        org = old.get_model("accesspolicies", "Organization").objects.create(name="A", slug="a")
        clusters = old.get_model("jobs", "Cluster").objects
        clusters.create(organization=org, name="before", kubevirt_devices=[])
        clusters.create(organization=org, name="read", kubevirt_devices=["nvidia.com/AD104GL_L4"])
        executor.loader.build_graph()
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps.get_model("jobs", "Cluster").objects
        assert new.get(name="before").kubevirt_devices is None
        assert new.get(name="read").kubevirt_devices == ["nvidia.com/AD104GL_L4"]
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())  # as the other tests expect
