"""The broker's door: the asyncio gRPC server (:mod:`~horizon_broker.broker.api.server`), its query and
inspection services, protobuf conversions (:mod:`~horizon_broker.broker.api.messages`), the one mapping of
Horizon's errors to gRPC codes (:mod:`~horizon_broker.broker.api.status`), authentication, admission and the
offload of blocking work from the event loop.

May import :mod:`horizon_broker.broker.engine`, :mod:`horizon_broker.broker.sql`, :mod:`horizon_broker.broker.spark` and everything below the
broker; nothing in the broker imports it (the client uses its wire helpers, ``arrow_ipc`` and
``status``).
"""
