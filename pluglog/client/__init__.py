"""pluglog.client package."""
