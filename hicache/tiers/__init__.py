"""Tier policies (L1 GPU, L2 host, L3 storage): pure, synchronous decisions."""
