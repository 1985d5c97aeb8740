"""`suite ab`: the driver (A, B, B, A), the two checkouts (sides) and the server each one runs."""
