"""The compiler's passes, one module each; :mod:`tilec.pipeline` orders them."""
