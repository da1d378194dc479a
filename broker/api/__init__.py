"""The broker's door: the asyncio gRPC server (:mod:`~broker.api.server`), its query and
inspection services, protobuf conversions (:mod:`~broker.api.messages`), the one mapping of
Horizon's errors to gRPC codes (:mod:`~broker.api.status`), authentication, admission and the
offload of blocking work from the event loop.

May import :mod:`broker.engine`, :mod:`broker.sql`, :mod:`broker.spark` and everything below the
broker; nothing in the broker imports it (the client uses its wire helpers, ``arrow_ipc`` and
``status``).
"""
