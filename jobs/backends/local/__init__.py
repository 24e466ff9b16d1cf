"""The `local` backend: model servers as processes on this machine.

- runner.py: LocalRunner, the verbs (apply, restart, stop, start, delete, observe) on state
  kept per organisation and application (state.json and the lock, read and written there);
- errors.py: LocalRefused, UnknownApplication, LocalStateError (runner.py exports them);
- state.py: the records kept per application and the status derived from them (pure);
- command.py: the command line and environment of a model server, from the manifest;
- machine_check.py: what this machine must have to run a manifest (vLLM, cores, memory, GPUs);
- serving_plan.py and runtimes.py: which server runs a manifest here (vLLM or a CPU runtime);
- download_files.py: which files of an hf:// model (or a bucket folder) a CPU runtime
  downloads, where their snapshot lies, and whether they fit the downloads folder's disk (pure);
- model_files.py: which of a model folder's files infinity-emb may be given;
- replica_start.py: starting one replica (its command, environment, log line, process), or
  recording why it was not started;
- replica_status.py: what a status reads from the replicas (readiness probes and warm-up,
  download progress, the last run's log lines);
- download_plan.py: an hf:// application's download as the runner handles it (the launcher's
  plan, the snapshot a replica serves, the references that keep a snapshot);
- download_launcher.py: a CPU runtime replica's download of an hf:// model (or of an s3://
  folder, a gs:// or an Azure Blob one, at the versions pinned at apply), then the runtime;
  storage_env.py: the variables a bucket folder's download is read with, and taken out after;
- download_space.py: the shared downloads folder's room (reservations) and its snapshots'
  lifetime (references);
- processes.py: processes, process groups, ports and logs (Linux /proc);
- gpu_plan.py: which free GPUs an organisation's replicas get, recorded in the ledger;
- gpu_ledger.py: which GPUs each replica holds, machine-wide, for every organisation.
"""
