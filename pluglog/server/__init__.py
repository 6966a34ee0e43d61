"""pluglog.server package."""
