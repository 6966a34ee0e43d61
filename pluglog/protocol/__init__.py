"""pluglog.protocol package."""
