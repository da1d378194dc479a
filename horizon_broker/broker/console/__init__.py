"""The web console: tables, timelines, watermarks, locks, pins and queries in a browser.

Server-rendered pages (Starlette, Jinja2 templates, a little JavaScript of our own, the timeline
as the SVG the CLI's ``--picture`` draws) on ``[console] listen``. It answers through the same
service layer as the gRPC API (:mod:`horizon_broker.broker.api.inspection` for inspection, the engine's
``execute`` and :func:`horizon_broker.broker.api.query_service.explain_query` for the query box), so grants and
queries have one implementation. :mod:`~horizon_broker.broker.console.sessions` signs browsers in with a token,
:mod:`~horizon_broker.broker.console.queries` runs the query box, :mod:`~horizon_broker.broker.console.pages` renders,
:mod:`~horizon_broker.broker.console.server` serves.
"""
