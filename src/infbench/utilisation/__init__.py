"""Distance to the hardware: the machine's memory bandwidth, and model bandwidth utilisation (MBU)."""
