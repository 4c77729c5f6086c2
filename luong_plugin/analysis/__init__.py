"""Analysis tools of the papers (Luong §5, Bahdanau §5)."""
