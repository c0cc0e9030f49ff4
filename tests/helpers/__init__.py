"""Helpers shared by the scale-out tests: a Redis Cluster starter, a balancer, processes."""
