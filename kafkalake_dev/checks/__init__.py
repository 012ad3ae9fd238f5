"""What the dev tooling checks a lake or a catalog by: the offset audit, the inventory, the interop and readers'
counts, schema compatibility, and the access matrix."""
