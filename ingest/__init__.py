"""Upsert ingestion on PySpark: changelog in, versioned segments and watermarks out."""
