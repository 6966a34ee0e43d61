"""pluglog.storage package."""
