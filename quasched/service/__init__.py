"""quasched serve: the scheduler service (docs/service.md)."""
