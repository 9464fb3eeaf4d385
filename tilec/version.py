"""tilec's version: the package's, and the compiler's in every cache key and cache entry.

A module of its own, importing nothing, so that the compiler, the on-disk cache and the
package's ``__init__`` all read it without importing one another."""

COMPILER_VERSION = "0.1.0"
