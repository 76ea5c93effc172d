"""State layer: graphs and their run-time state, shared memory, messages, the run ledger."""
