"""The resolver's rules as public steps, one concern a module: the wishes (the request read once),
the framework builds, the wheelhouse, the CUDA and driver rules, Python, the GPU rules, the fixes
and the reasons. `gpuenv.compat.resolve` runs them in the order of its `STEPS`."""
