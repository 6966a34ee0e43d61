"""Sphinx configuration for pluglog's documentation."""

project = "pluglog"
author = "pluglog developers"
release = "0.1.0"
extensions = []
master_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
