"""Watching a broker: its Prometheus metrics and its structured log lines.

:mod:`~horizon_broker.broker.observe.metrics` is the bottom of this room: the broker's registry and the families
counted as work happens; the query path imports only it. The rest reads state when asked: the
collector of per-table and per-component gauges (:mod:`~horizon_broker.broker.observe.state_metrics`), the line
per query end (:mod:`~horizon_broker.broker.observe.query_log`), the lines per state change
(:mod:`~horizon_broker.broker.observe.state_changes`), and what a broker starts of all that
(:mod:`~horizon_broker.broker.observe.wiring`).
"""
