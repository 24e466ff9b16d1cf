from django.db import migrations, models


def unknown_until_discovered(apps, schema_editor):
    # An empty list was written both for "KubeVirt permits none" and for "could not be read"
    # (a refused read of the KubeVirt CR, or a cluster discovered before the field existed):
    # they cannot be told apart now, so they are unknown until the next discovery.
    Cluster = apps.get_model("jobs", "Cluster")
    Cluster.objects.filter(kubevirt_devices=[]).update(kubevirt_devices=None)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0008_application_runtime"),
    ]

    operations = [
        migrations.AlterField(
            model_name="cluster",
            name="kubevirt_devices",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
        migrations.RunPython(unknown_until_discovered, migrations.RunPython.noop),
    ]
