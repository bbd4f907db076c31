"""The code generator: the VPU op list -> tiled, scheduled instruction streams. Relax-free."""
