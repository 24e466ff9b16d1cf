"""The phases an application goes through, in a module of their own so that the status
derivation (a pure core) names them without importing the models. `jobs.models.Phase` is this
class; TextChoices is a plain enum with labels, not the ORM."""

from django.db.models.enums import TextChoices


class Phase(TextChoices):
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    DOWNLOADING = "Downloading"
    LOADING = "Loading"
    RUNNING = "Running"
    UPDATING = "Updating"
    FAILED = "Failed"
    STOPPED = "Stopped"
    DELETING = "Deleting"
