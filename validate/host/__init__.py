"""Reading the host: NVML live, nvidia-smi captures, their replay and gpuenv's own recordings,
the devices each framework sees, and what `CUDA_VISIBLE_DEVICES` should leave visible."""
