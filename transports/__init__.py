"""Transports: where out-of-band tensor buffers live (inline frames, shared memory, ...)."""

__all__: list[str] = []
