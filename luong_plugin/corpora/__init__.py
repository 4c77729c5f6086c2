"""Real parallel corpora built from locally installed, public-domain sources."""
