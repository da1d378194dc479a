"""The rewrite pipeline's passes, one module each, in the order ``broker.sql.rewrite`` runs them."""
