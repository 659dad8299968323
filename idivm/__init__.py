"""idivm: ID-based incremental view maintenance for SQL++ views on Spark + Delta Lake."""

__version__ = "0.1.0"
__all__ = ["Warehouse"]


def __getattr__(name: str):
    # imported lazily so that `import idivm` stays light (no pyarrow/pyspark until needed)
    if name == "Warehouse":
        from idivm.warehouse import Warehouse

        return Warehouse
    raise AttributeError(f"module 'idivm' has no attribute {name!r}")
