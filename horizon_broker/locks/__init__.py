"""Druid-style task locks in Redis: time-chunk and segment locks with priorities and leases.

:mod:`horizon_broker.locks.rules` holds the rules (pure), :mod:`horizon_broker.locks.scripts` the same rules as atomic Lua
scripts, and :mod:`horizon_broker.locks.client` a job's handle on its locks (acquire, renew, release, inspect).
"""
