"""Lock an environment: render the spec, lock it (conda or uv), keep the lock folder, the
wheelhouse for air-gapped sites, export it, and install it into a prefix without Docker."""
