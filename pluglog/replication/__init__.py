"""pluglog.replication package."""
