"""The rewrite pipeline's passes, one module each, in the order ``horizon_broker.broker.sql.rewrite`` runs them."""
