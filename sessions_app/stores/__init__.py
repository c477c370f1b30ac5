"""The only code that opens a Hermes ``state.db`` (docs/architecture.md §1."""
