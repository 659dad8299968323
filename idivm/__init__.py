"""idivm: ID-based incremental view maintenance for SQL++ views on Spark + Delta Lake."""

__version__ = "0.1.0"
