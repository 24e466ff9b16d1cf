"""The deploy wizard: Model, Check model, Compute, Access, API and Review, each step editing a
server-side draft manifest that the dry run checks (see jobs.wizard.flow)."""
