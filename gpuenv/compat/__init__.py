"""Choose a stack: the compatibility data, the resolver, the host it reads, upstream drift, and
the views of all three (`invoke resolve`, `matrix`, `doctor`)."""
