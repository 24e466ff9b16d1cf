"""`manage.py reconcile`: keep every application's status true until SIGTERM or Ctrl-C."""

import signal

from accesspolicies.cli import ServeDeckCommand
from jobs.reconciler import Reconciler, in_process, leader, metrics


class Command(ServeDeckCommand):
    help = "Follow every cluster and keep each application's phase, reason and endpoint true."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between checks")
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument(
            "--unless-in-process",
            action="store_true",
            help="exit at once when the console runs the reconciler inside its own process "
            "(SERVEDECK_RECONCILER_IN_PROCESS): what scripts/run.sh starts beside the console",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=0,
            help="serve Prometheus' /metrics and a /healthz probe on this port (0: none)",
        )

    def handle(self, *args, interval, once, unless_in_process, metrics_port, **options):
        if unless_in_process and in_process.enabled():
            self.stdout.write(
                "The console runs the reconciler inside its own process "
                "(SERVEDECK_RECONCILER_IN_PROCESS is on): none is started here."
            )
            return
        # Several replicas in a cluster (SERVEDECK_LEADER_ELECTION_NAMESPACE): one leads and acts.
        elector = None if once else leader.from_settings()
        reconciler = Reconciler(interval=interval, leader=elector)
        if once:
            changed = reconciler.step()
            self.stdout.write(f"{changed} application(s) changed")
            return
        signal.signal(signal.SIGTERM, reconciler.stop)
        signal.signal(signal.SIGINT, reconciler.stop)
        server = metrics.serve(reconciler, metrics_port) if metrics_port else None
        try:
            reconciler.run()
        finally:
            if server is not None:
                server.shutdown()
