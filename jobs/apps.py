from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Models served"

    def ready(self) -> None:
        from jobs.backends.local import download_files
        from jobs.gateway import signals
        from jobs.live import members

        # Settings that only the local backend reads, read the way it reads them: a bad value
        # stops the start, naming the variable, rather than the first download.
        try:
            download_files.reserve_bytes(settings.SERVEDECK_DOWNLOADS_RESERVE, 0)
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from None
        signals.connect()
        members.connect()
