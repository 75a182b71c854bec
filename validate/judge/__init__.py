"""Judging: the verdict rules (thresholds), the measured references they compare with
(`gpu_peaks.yaml`, each figure with its source) and the driver gate."""
