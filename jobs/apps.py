from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Models served"

    def ready(self) -> None:
        from jobs.gateway import signals

        signals.connect()
