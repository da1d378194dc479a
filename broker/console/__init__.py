"""The web console: tables, timelines, watermarks, locks, pins and queries in a browser.

Server-rendered pages (Starlette, Jinja2 templates, a little JavaScript of our own, the timeline
as the SVG the CLI's ``--picture`` draws) on ``[console] listen``. It answers through the same
service layer as the gRPC API (:mod:`broker.api.inspection` for inspection, the engine's
``execute`` and :func:`broker.api.query_service.explain_query` for the query box), so grants and
queries have one implementation. :mod:`~broker.console.sessions` signs browsers in with a token,
:mod:`~broker.console.queries` runs the query box, :mod:`~broker.console.pages` renders,
:mod:`~broker.console.server` serves.
"""
