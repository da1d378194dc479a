"""Druid-style task locks in Redis: time-chunk and segment locks with priorities and leases.

:mod:`locks.rules` holds the rules (pure), :mod:`locks.scripts` the same rules as atomic Lua
scripts, and :mod:`locks.client` a job's handle on its locks (acquire, renew, release, inspect).
"""
