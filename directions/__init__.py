"""Built-in optimisation directions C, P, M, R, T: what each is and how it scores (the architectures say the rest)."""
