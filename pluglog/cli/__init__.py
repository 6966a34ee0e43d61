"""pluglog.cli package."""
