"""Admission: key state, allowlists, quota and token bucket in one Redis call (limiter, admit.lua).

May import: redis, config.
"""
