"""pluglog.serialization package."""
