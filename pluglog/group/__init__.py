"""pluglog.group package."""
