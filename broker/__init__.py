"""Horizon broker: the gRPC service, the SQL rewrite, Spark execution, client and CLI."""
