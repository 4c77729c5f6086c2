"""Building blocks: encoders, scores x windows, attention, decoders."""
