"""`manage.py reconcile`: keep every application's status true until SIGTERM or Ctrl-C."""

import signal

from accesspolicies.cli import ServeDeckCommand
from jobs.reconciler import Reconciler


class Command(ServeDeckCommand):
    help = "Follow every cluster and keep each application's phase, reason and endpoint true."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between checks")
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, interval, once, **options):
        reconciler = Reconciler(interval=interval)
        if once:
            changed = reconciler.step()
            self.stdout.write(f"{changed} application(s) changed")
            return
        signal.signal(signal.SIGTERM, reconciler.stop)
        signal.signal(signal.SIGINT, reconciler.stop)
        reconciler.run()
