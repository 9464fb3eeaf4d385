"""Instruction families and data-movement families: what varies by hardware generation.

``products.py`` lists the product (instruction) families, each one module (``mma_sync.py``,
``ffma.py``, ``tf32.py``) with the ``ProductFamily`` hooks of ``product.py``;
``catalogue.py`` joins every op's definition to its CPU semantics. This package's own
module imports nothing, so that importing one family does not import them all.
"""
