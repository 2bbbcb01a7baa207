"""The dispatcher layer: the one place a backend is resolved (:mod:`.backends`)
and the one chooser and runner of algorithms (:mod:`.dispatcher`)."""
from .backends import available_backends, backend_for, device_constant, get_backend, use_backend
from .dispatcher import Choice, choose, clear_cache, precheck, run

__all__ = ["use_backend", "get_backend", "available_backends", "backend_for", "device_constant",
           "Choice", "choose", "precheck", "run", "clear_cache"]
