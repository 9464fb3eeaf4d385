"""Instruction families and data-movement families: what varies by hardware generation.

``products.py`` lists the product (instruction) families, each one module (``mma_sync.py``,
``ffma.py``, ``tf32.py``) with the ``ProductFamily`` hooks of ``product.py``;
``movements.py`` lists the data-movement families (``cp_async.py``) with the
``MovementFamily`` hooks of ``movement.py``. Each family defines its IR ops with their CPU
semantics; ``catalogue.py`` joins them to the IR layer's ops into the op catalogue. This
package's own module imports nothing, so that importing one family does not import them all.
"""
