"""Measuring: the probes that run a framework in a fresh subprocess (matmul, bandwidth, memory
modes, masking cases), their runner, and the process budget of a quick run."""
