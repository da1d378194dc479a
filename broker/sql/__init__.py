"""The SQL layer: parse a client's Spark SQL, refuse what is unsafe, read only visible versions.

Public API: :func:`rewrite`, :class:`Catalog`, :class:`CatalogTable`, :class:`FunctionPolicy`,
:class:`RewriteLimits`, :class:`RewriteResult`, :class:`QueryPlan`, :class:`TableRead`.
"""

from broker.sql.catalog import Catalog, CatalogTable
from broker.sql.functions import ALLOWED_TABLE_FUNCTIONS, DENIED_FUNCTIONS, FunctionPolicy
from broker.sql.model import QueryPlan, RewriteLimits, RewriteResult, TableRead
from broker.sql.rewrite import rewrite

__all__ = [
    "ALLOWED_TABLE_FUNCTIONS",
    "DENIED_FUNCTIONS",
    "Catalog",
    "CatalogTable",
    "FunctionPolicy",
    "QueryPlan",
    "RewriteLimits",
    "RewriteResult",
    "TableRead",
    "rewrite",
]
