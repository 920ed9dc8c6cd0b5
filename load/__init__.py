"""Benchmarks and Locust load tests; each prints one JSON object."""
