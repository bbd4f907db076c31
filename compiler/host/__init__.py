"""The host stage: the host graph -> scheduled TIR kernels -> relax.build, with the default
schedules and the tuning database (`vpuc tune` sits on top of it)."""
