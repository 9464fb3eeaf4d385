"""Backends that turn lowered tile IR into PTX text. ``render(kernel, options)`` is the one
entry point each offers."""
