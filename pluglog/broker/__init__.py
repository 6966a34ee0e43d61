"""pluglog.broker package."""
