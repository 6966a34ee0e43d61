"""pluglog.coordination package."""
