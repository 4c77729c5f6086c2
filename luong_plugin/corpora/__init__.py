"""Parallel corpora: the Spanish-English Bible (local, public domain) and the papers' WMT sets."""
