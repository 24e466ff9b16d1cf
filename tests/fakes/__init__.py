"""Local stand-ins for the outside world that tests and benches talk to over real HTTP."""
