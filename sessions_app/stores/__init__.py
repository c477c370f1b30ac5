"""The only code that opens a Hermes ``state.db`` (design.md section 2)."""
