"""The resolver's rules, one concern a module: the request, the framework builds, the wheelhouse, the
CUDA and driver rules, the GPU rules, the fixes and the reasons. `gpuenv.compat.resolve` applies them."""
