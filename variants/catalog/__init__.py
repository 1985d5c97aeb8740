"""The declarations: one file per variant, each registering exactly one (variants/__init__ imports them all)."""
