"""Metering's vocabulary, written by the gateway and read by the pages and the API: the counters
of a minute and the latency histogram (counters.py, histogram.py), their rows (store.py), the
readers of those rows (readers.py), the charts (charts.py), replica time and what it costs
(replica_time.py, cost.py), and the usage API (api.py)."""
