"""Load tests of a running neardup: locust workloads, preloading, and a one-command runner."""
