"""Benchmarks of Clearance against the frameworks users would pick instead (``make bench``)."""
