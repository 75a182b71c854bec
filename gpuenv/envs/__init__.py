"""Lock an environment: render the spec, lock it (conda or uv), keep the lock folder, the
wheelhouse for air-gapped sites, export it, and install it into a prefix without Docker."""

#: The lock backends (here, not in locking.py, so that reading the team's settings stays light).
BACKENDS = ("conda-lock", "uv")
