"""The cache manager both the scheduler and replay call (as vLLM's scheduler calls its
KVCacheManager): page budgets, make-room, load-back, write policy, L3 prefetch, sessions."""
