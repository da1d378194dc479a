"""Everything that touches Spark: failures by type (more moves here with the layout)."""
