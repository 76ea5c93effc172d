"""Core layer: errors, ids, clock and the declarative specs every other layer reads."""
