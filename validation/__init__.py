"""Predicted-versus-measured validation: the composition layer over ``hicache``, ``sim``
and ``gpu_backend`` (only the CLI imports it)."""
