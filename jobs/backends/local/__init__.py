"""The `local` backend: model servers as processes on this machine.

- runner.py: LocalRunner, the verbs (apply, restart, stop, start, delete, observe) on state
  kept per organisation and application;
- state.py: the records kept per application and the status derived from them (pure);
- command.py: the command line and environment of a model server, from the manifest;
- machine_check.py: what this machine must have to run a manifest (vLLM, cores, memory, GPUs);
- serving_plan.py and runtimes.py: which server runs a manifest here (vLLM or a CPU runtime);
- download_launcher.py: a CPU runtime replica's download of an hf:// model, then the runtime;
- processes.py: processes, process groups, ports and logs (Linux /proc);
- gpu_ledger.py: which GPUs each replica holds, machine-wide, for every organisation.
"""
