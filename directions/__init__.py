"""Built-in optimisation directions C, P, M, R, T. Each module is one plugin; none imports another."""
