"""Spark sessions and Delta Lake tables.

``spark`` is the one place that creates a SparkSession; ``delta`` is the one
place that touches Delta Lake (through delta-rs); ``schema`` converts schemas
between Arrow, Spark and what Delta Lake can store.  Nothing here imports
pyspark at module level, so code that only reads Delta tables never starts a JVM.
"""
