"""Snapshot pins: a reader's hold on a snapshot of some tables for a lease.

While a pin is live, no retention horizon passes its snapshot (the servers' retention report is
capped by the oldest pin in the same Redis step, :mod:`horizon_broker.watermark.scripts`) and no replaced file a
pinned reader may have been told about is deleted (:func:`horizon_broker.pins.rules.holds_release`). Pins live in
Redis beside the locks (:mod:`horizon_broker.pins.store`); an expired pin holds nothing back.
"""
